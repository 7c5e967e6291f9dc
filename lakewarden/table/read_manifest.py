"""Read manifests: a snapshot's Parquet files, for readers that cannot replay the timeline.

The JVM side of the ``lakewarden`` Spark format (``lakewarden/spark/java/``) hands a snapshot
to Spark's own Parquet reader. It does not replay the timeline: after every ``completed``
entry a process appends (``Timeline.after_completed``), the process writes the latest
snapshot's file list as ``.lakewarden/read/<seq:020d>_<as_of>.json``:

- ``seq``: the timeline's tail when the snapshot was built (every entry up to it applied);
- ``as_of``: the snapshot's last completed instant;
- ``schema``: the table's columns as Spark's JSON schema;
- ``config_sha256``: the digest of ``table.json`` the schema came from;
- ``files``: each base file (key relative to the table root, and size).

Only a snapshot Spark's reader can return exactly gets one: every slice a plain Parquet file
(no merge-on-read log blocks to merge) and every column of a type Spark reads as the table
gives it (``native_type``). The content is a deterministic function of the timeline prefix, and
it is created only if absent, so racing writers write the same bytes or lose harmlessly.

A manifest is a cache, never the truth: the reader trusts one only after checking the
timeline entries appended after its ``seq`` (the rules are in ``LakewardenSource.java``) and the
config digest, and reads through the Python source otherwise.

Only tables on storage with local paths get manifests: the JVM side plans local tables only
(``ReadManifest.localRoot``; S3 tables are read through the Python source or
``lakewarden.spark.read``), so elsewhere a manifest would be a put, a listing and deletes per
commit that nothing reads.

Pruning: the first manifest a process writes for a table, and every ``KEEP``-th after it,
lists the manifests and deletes all but the newest ``KEEP`` (best effort); the others are one
put and no listing. A table holds at most about ``KEEP`` manifests per process writing it
beyond the newest ``KEEP``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from lakewarden.storage import AlreadyExistsError, Storage
from lakewarden.storage._keys import TEMP_PREFIX
from lakewarden.table.config import CONFIG_KEY, TableConfig
from lakewarden.table.snapshot import SnapshotCache, build_snapshot
from lakewarden.table.stats import WriteStat
from lakewarden.table.timeline import Timeline, TimelineEntry

log = logging.getLogger("lakewarden.read_manifest")

PREFIX = ".lakewarden/read/"
FORMAT_VERSION = 1
KEEP = 16

# Spark SQL's names of the primitive types (in the read manifests Spark's own reader plans
# from); Delta's protocol uses the same names (``lakewarden.publish.schema``).
PRIMITIVE_TYPE_NAMES: tuple[tuple[Any, str], ...] = (
    (pa.types.is_boolean, "boolean"),
    (pa.types.is_int8, "byte"),
    (pa.types.is_int16, "short"),
    (pa.types.is_int32, "integer"),
    (pa.types.is_int64, "long"),
    (pa.types.is_float32, "float"),
    (pa.types.is_float64, "double"),
    (pa.types.is_string, "string"),
    (pa.types.is_large_string, "string"),
    (pa.types.is_binary, "binary"),
    (pa.types.is_large_binary, "binary"),
    (pa.types.is_date32, "date"),
)


def manifest_key(seq: int, as_of: str) -> str:
    return f"{PREFIX}{seq:020d}_{as_of}.json"


def spark_type(t: pa.DataType) -> str | None:
    """The Spark SQL type (its JSON name) that Spark's Parquet reader gives a column of
    Arrow type ``t`` exactly as the table gives it, or None where it does not (a nanosecond
    timestamp, an unsigned integer, a nested type: those reads go through Python). The same
    names as ``pyspark.sql.pandas.types.from_arrow_type``, which the Python source uses."""
    for test, name in PRIMITIVE_TYPE_NAMES:
        if test(t):
            return name
    if pa.types.is_timestamp(t) and t.unit in ("ms", "us"):
        return "timestamp"
    if pa.types.is_decimal128(t):
        return f"decimal({t.precision},{t.scale})"
    return None


def spark_schema_json(schema: pa.Schema) -> str | None:
    """``schema`` as Spark's JSON schema, or None when a column has no exact Spark type."""
    fields = []
    for field in schema:
        name = spark_type(field.type)
        if name is None:
            return None
        fields.append(
            {"name": field.name, "type": name, "nullable": field.nullable, "metadata": {}}
        )
    return json.dumps({"type": "struct", "fields": fields}, separators=(",", ":"))


class EncodedFiles:
    """The JSON of each ``files`` entry of the last manifest written, by path (a file's size
    never changes), kept by the hook between commits: most files of a table's next manifest
    were in its last, and encoding every entry again was most of a commit's manifest cost."""

    def __init__(self) -> None:
        self._by_path: dict[str, str] = {}

    def array(self, files: Sequence[WriteStat]) -> str:
        """The JSON array of ``files``' entries; the entries kept are now these."""
        entries = [self._by_path.get(f.path) or _file_entry(f) for f in files]
        self._by_path = dict(zip((f.path for f in files), entries, strict=True))
        return "[" + ",".join(entries) + "]"


def _file_entry(file: WriteStat) -> str:
    return json.dumps({"path": file.path, "size": file.size_bytes}, separators=(",", ":"))


def write_latest(
    storage: Storage,
    config: TableConfig,
    timeline: Timeline,
    *,
    prune: bool = True,
    snapshots: SnapshotCache | None = None,
    encoded: EncodedFiles | None = None,
) -> str | None:
    """Write the manifest of the latest snapshot (when Spark's reader can read it exactly)
    and, with ``prune``, delete all but the newest ``KEEP``; the key written, or None. A
    ``snapshots`` cache kept between calls applies only the instants completed since the
    last one (without it the whole timeline is replayed), and ``encoded`` encodes only the
    files the last manifest did not list.

    Raises: StorageError, TimelineError."""
    state = timeline.load()
    completed = state.completed()
    snapshot = snapshots.latest(completed) if snapshots else build_snapshot(completed)
    schema = spark_schema_json(config.pa_schema)
    slices = list(snapshot.slices.values())
    if snapshot.as_of is None or schema is None or any(s.log_files for s in slices):
        return None
    # In the snapshot's order, not sorted: a function of the timeline prefix too (the order in
    # which its instants added and replaced slices), and sorting every file of a large table
    # was most of the cost a commit paid for its manifest.
    files = [s.base_file for s in slices if s.base_file is not None]
    head = {
        "format_version": FORMAT_VERSION,
        "table": config.name,
        "seq": state.tail_seq,
        "as_of": snapshot.as_of,
        "config_sha256": hashlib.sha256(storage.read(CONFIG_KEY)).hexdigest(),
        "schema": schema,
    }
    array = (encoded or EncodedFiles()).array(files)
    # The object with "files" last, as json.dumps of the whole body would write it.
    text = json.dumps(head, separators=(",", ":"))[:-1] + ',"files":' + array + "}"
    key = manifest_key(state.tail_seq, snapshot.as_of)
    try:
        _create(storage, key, text.encode())
    except AlreadyExistsError:
        pass  # another process wrote the same snapshot: the same bytes
    if prune:
        _prune(storage)
    return key


def _create(storage: Storage, key: str, data: bytes) -> None:
    """Create ``key`` unless it exists (``AlreadyExistsError``). A manifest is a cache: where
    nothing stands between this process and the files (``direct_file_access``), it is linked
    into place from a temporary file without the two fsyncs of a durable
    ``write_if_absent``. A crash can leave it empty or cut short; the JVM side cannot parse
    it, or finds no ``format_version``, and reads through the Python source.

    Raises: AlreadyExistsError, StorageError, OSError."""
    path = storage.local_path(key) if storage.capabilities.direct_file_access else None
    if path is None:
        storage.write_if_absent(key, data)
        return
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    temporary = final.with_name(f"{TEMP_PREFIX}{uuid.uuid4().hex}")  # the cleaner's temp rule
    try:
        temporary.write_bytes(data)
        os.link(temporary, final)
    except FileExistsError as err:
        raise AlreadyExistsError(f"read manifest {key!r} exists", key=key) from err
    finally:
        temporary.unlink(missing_ok=True)


def _prune(storage: Storage) -> None:
    keys = sorted(info.key for info in storage.list(PREFIX) if info.key.endswith(".json"))
    for key in keys[:-KEEP]:
        storage.delete(key)


def wanted(storage: Storage) -> bool:
    """Whether a table on ``storage`` gets read manifests (its files have local paths)."""
    return storage.capabilities.local_paths


def hook(
    storage: Storage, config: TableConfig, timeline: Timeline, snapshots: SnapshotCache
) -> Callable[[TimelineEntry], None] | None:
    """A ``Timeline.after_completed`` callable writing the manifest after each completion,
    never raising (a manifest is a cache: without one, reads take the Python source); None
    where no manifest is wanted (``wanted``). ``snapshots``: the opened table's cache (a
    commit applies its own instant, not the whole timeline)."""
    if not wanted(storage):
        return None
    written = itertools.count()
    encoded = EncodedFiles()
    lock = threading.Lock()  # one manifest at a time from the threads writing one table

    def after_completed(entry: TimelineEntry) -> None:
        try:
            with lock:
                prune = next(written) % KEEP == 0
                write_latest(
                    storage, config, timeline, prune=prune, snapshots=snapshots, encoded=encoded
                )
        except Exception:  # noqa: BLE001 - best effort: storage and the timeline are the truth
            log.warning("table %s: read manifest after %s not written", config.name, entry.instant)

    return after_completed


__all__ = [
    "FORMAT_VERSION",
    "EncodedFiles",
    "KEEP",
    "PREFIX",
    "hook",
    "manifest_key",
    "spark_schema_json",
    "spark_type",
    "wanted",
    "write_latest",
]
