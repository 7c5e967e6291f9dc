"""``bulk_insert`` through Spark's own Parquet writer: no Python Data Source hop for the rows.

The Python Data Source path moves every row through a Python worker as Arrow batches, which
on a 2-core machine costs about as much as Spark's whole Parquet write. An append needs
lakewarden's own code for two values per row only: the bucket of the record key (FNV-1a of its
text, ``table.bucket``), which Spark has no function for, and the escaped partition path. Both
are Java UDFs (``_jvm_udf``, compiled once from the sources shipped with the package), so no
row goes through Python and Spark writes every column, in the JVM, with its vectorised Parquet
writer; each task sorts its rows by file group (Spark's planned write) and writes one file per
file group.

The protocol is the plain format's, with Spark's committer guarding the task attempts:

1. ``_job.open_write`` (the helper): committer job set up, table lock, ``requested``.
2. Under the instant's heartbeat, one Spark job writes the rows, with the meta columns
   computed by Spark (commit time, record key text, partition path, file name), partitioned by
   two hidden columns (partition path, bucket) so that each task writes one file per file
   group, into ``_temporary/manifest_<jobId>/spark/`` (inside the job's own directory, so job
   abort and cleanup delete whatever is left there). Spark's ``FileOutputCommitter``
   (algorithm 1, forced by a write option) promotes exactly one attempt per task: a failed,
   retried or speculative attempt's files never leave its ``_temporary`` attempt directory.
3. The driver adopts the promoted files as one task attempt of the lakewarden job (task 0,
   attempt 0): each file's file group and name are read from its own meta columns (Parquet
   column statistics, checked to be a single value), it is fsynced and renamed into the
   attempt's working directory under its destination key, and the task commit saves the
   manifest. Two files for one destination (a committer that let two attempts through) fail
   the write.
4. ``_job.commit_write`` with that one message: ``inflight`` with the workload profile, job
   commit of exactly that attempt, ``completed`` (in the driver, or by job-committer with
   Kafka configured) — the same code the Python Data Source path runs.

File names: each task's rows of a bucket form the append group ``<bucket>-<instant>-<task>``
(as on the Python path); a file's write token is ``<task>-0-0`` because a SQL expression sees
the task's partition id but not its stage or attempt number. Only one attempt per task is
promoted (step 2), so the name is still unique.

Where it does not apply (``unsupported_reason``), the helper keeps the Python Data Source
path: storage without local paths (S3 uploads), the error table on (bad rows are routed in
Python), column types whose Spark Parquet encoding differs from pyarrow's (timestamps,
decimals, unsigned and large types), record keys other than integers and strings.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame

import lakewarden.faults as faults
from lakewarden.commit import ManifestCommitter
from lakewarden.commit._localfs import fsync_file
from lakewarden.commit._store import CommitStore
from lakewarden.commit.layout import JobLayout
from lakewarden.errors import NonRetryableError
from lakewarden.settings import Settings
from lakewarden.spark import _jvm_udf, _native_columns
from lakewarden.spark._messages import TaskCommitMessage
from lakewarden.spark._native_columns import (
    BUCKET_COLUMN,
    PATH_COLUMN,
    SPARK_TYPES,
    TASK_FAULTS,
    MetaColumns,
)
from lakewarden.spark._options import WriteSpec
from lakewarden.storage import Storage
from lakewarden.table.bucket import append_group
from lakewarden.table.config import META_FILE_NAME, META_PARTITION_PATH, TableConfig
from lakewarden.table.files import BaseFileName, WriteToken, bucket_file_id, file_key
from lakewarden.table.parquet_options import COMPRESSION
from lakewarden.table.stats import FileGroupId, WriteStat

log = logging.getLogger("lakewarden.spark")

_STAGING = "spark"
# Threads reading footers and fsyncing Spark's files during the adoption (disk-bound).
_ADOPT_THREADS = 8


class NativeWriteError(NonRetryableError):
    """Spark's output could not be adopted (a file without its meta columns, or two files
    for one destination); nothing of the write becomes visible."""


def unsupported_reason(config: TableConfig, settings: Settings, storage: Storage) -> str | None:
    """Why a ``bulk_insert`` cannot go through Spark's Parquet writer, or None if it can."""
    if storage.local_path(_STAGING) is None or not CommitStore(storage).can_rename:
        return "the table's storage has no local paths (S3 uploads need the Python writer)"
    if settings.error_table.enabled:
        return "the error table is on (bad rows are routed in Python)"
    for field in config.pa_schema:
        if field.type not in SPARK_TYPES:
            return f"column {field.name!r} has type {field.type}, which Spark writes differently"
    key_type = config.pa_schema.field(config.record_key).type
    if not (pa.types.is_integer(key_type) or pa.types.is_string(key_type)):
        return f"record key type {key_type} (its text in Spark may differ from pyarrow's)"
    return None


def write_files(
    df: DataFrame,
    config: TableConfig,
    spec: WriteSpec,
    storage: Storage,
    columns: MetaColumns | None = None,
) -> None:
    """Step 2: one Spark job writing the rows into the job's staging directory, each task's
    rows sorted by file group (Spark's planned write), one file per task and file group.
    ``columns``: the write's column expressions kept by the caller (``meta_columns``; a
    streaming query keeps them across micro-batches), else built for this write.

    Raises: JvmUdfUnavailableError, or whatever Spark raises (a bad value fails its task with
    the record key named)."""
    session = df.sparkSession
    _jvm_udf.register(session)
    if columns is None:
        columns = meta_columns(df, config, spec)
    out = columns.apply(df, spec.instant)
    writer = out.write.mode("errorifexists").partitionBy(PATH_COLUMN, BUCKET_COLUMN)
    # One file per task and file group, and only committed task attempts promoted.
    writer = writer.option("maxRecordsPerFile", 0)
    # zstd as pyarrow writes lakewarden's other files (``parquet_options``): about half of
    # snappy's bytes here, for the same CPU.
    writer = writer.option("compression", COMPRESSION)
    writer = writer.option("mapreduce.fileoutputcommitter.algorithm.version", "1")
    # Spark's planned write sorts each task's rows by file group and keeps one writer open:
    # measured at 2M rows, keeping a writer per file group open instead (no sort, up to 64
    # concurrent writers) cost 40-70% more CPU and about twice the wall time.
    writer.parquet(_staging_path(storage, spec))


def meta_columns(
    df: DataFrame, config: TableConfig, spec: WriteSpec, kept: MetaColumns | None = None
) -> MetaColumns:
    """The column expressions of a write of ``df`` (``_native_columns``): ``kept`` when it
    was built for the same input schema, table, uri and task faults, else new ones."""
    schema = df.schema
    armed = faults.planned(TASK_FAULTS)  # tests only: a fault plan arms the tasks' points
    if kept is not None and kept.matches(schema, config, spec.uri, armed):
        return kept
    return MetaColumns(schema, config, spec.uri, armed)


def file_group_columns(
    df: DataFrame, config: TableConfig, spec: WriteSpec
) -> tuple[Column, Column] | None:
    """(partition path, bucket) of every row of a merge's input, computed in the JVM, or
    None where Python must compute them (``_native_columns.file_group_columns``)."""
    return _native_columns.file_group_columns(df, config, spec.uri, spec.instant)


def adopt_files(storage: Storage, config: TableConfig, spec: WriteSpec) -> TaskCommitMessage:
    """Step 3: Spark's promoted files as the task attempt 0 of task 0, committed. Each file's
    footer read and fsync run in a thread pool (they wait on the disk, not the interpreter;
    a micro-batch has tens of small files), the renames in order.

    Raises: NativeWriteError, PathOutsideTableError, StageFailedError."""
    attempt = ManifestCommitter(storage, spec.job_id).task_attempt(0, 0)
    attempt.setup()
    files = list(_data_files(Path(_staging_path(storage, spec))))
    root = Path(_staging_path(storage, spec))
    named = partial(_durable_identity, root=root, config=config, instant=spec.instant)
    with ThreadPoolExecutor(max_workers=_ADOPT_THREADS, thread_name_prefix="lw-adopt") as pool:
        found = list(pool.map(named, files))
    stats: list[WriteStat] = []
    rows = 0
    for path, identity in zip(files, found, strict=True):
        if identity is None:
            continue
        partition_path, name, num_rows = identity
        group = FileGroupId(partition_path=partition_path, file_id=BaseFileName.parse(name).file_id)
        key = file_key(partition_path, name)
        destination = attempt.local_path(key)  # claims the key: a second claim is refused
        os.rename(path, destination)
        size = os.path.getsize(destination)
        stats.append(
            WriteStat(
                file_group=group,
                path=key,
                base_instant=spec.instant,
                num_records=num_rows,
                num_inserts=num_rows,
                size_bytes=size,
            )
        )
        rows += num_rows
    result = attempt.commit(extra_data={"instant": spec.instant, "operation": spec.operation})
    return TaskCommitMessage(
        instant=spec.instant,
        job_id=spec.job_id,
        attempt_id=str(attempt.attempt_id),
        manifest_key=result.manifest_key,
        write_stats=tuple(stats),
        num_input_records=rows,
    )


def _durable_identity(
    path: Path, *, root: Path, config: TableConfig, instant: str
) -> tuple[str, str, int] | None:
    """(partition path, file name, rows) of one of Spark's files under ``root``, fsynced
    (Spark does not; the manifest must only name durable files); None for a file without
    rows. A table that stores the two meta columns (format version 1) has them read from
    the file; else they come from the file's place (``_path_identity``).

    Raises: NativeWriteError."""
    meta = pq.ParquetFile(path).metadata
    if meta.num_rows == 0:
        return None
    if META_FILE_NAME in config.virtual_columns:
        partition_path, name = _path_identity(path, root, instant)
    else:
        partition_path, name = _identity(path, meta)
    fsync_file(path)
    return partition_path, name, meta.num_rows


def _staging_path(storage: Storage, spec: WriteSpec) -> str:
    path = storage.local_path(JobLayout(spec.job_id).job_dir + _STAGING)
    assert path is not None  # unsupported_reason() checked it
    return path


def _data_files(root: Path) -> Iterator[Path]:
    """Spark's promoted data files (its ``_SUCCESS``, ``.crc`` and ``_temporary`` left out)."""
    for path in sorted(root.rglob("*.parquet")):
        relative = path.relative_to(root).parts
        if not any(part.startswith(("_temporary", ".")) for part in relative):
            yield path


# Spark's name for a task's file: ``part-<task partition id:05d>-<job uuid>.c<n>...``.
_SPARK_FILE = re.compile(r"part-(\d+)-")
# The directory value Spark writes for a null or empty partition value.
_SPARK_NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def _path_identity(path: Path, root: Path, instant: str) -> tuple[str, str]:
    """(partition path, file name) of one of Spark's files from where Spark put it: the
    hidden partition directories ``<PATH_COLUMN>=<escaped path>/<BUCKET_COLUMN>=<bucket>``
    and the task number in its name. The name is the one the SQL expressions of
    ``_native_columns`` give a format version 1 file (the task's append group, token
    ``<task>-0-0``).

    Raises: NativeWriteError."""
    parts = path.relative_to(root).parts
    found = _SPARK_FILE.match(parts[-1]) if len(parts) == 3 else None
    path_dir, bucket_dir = parts[:2] if found is not None else ("", "")
    if (
        found is None
        or not path_dir.startswith(f"{PATH_COLUMN}=")
        or not bucket_dir.startswith(f"{BUCKET_COLUMN}=")
        or not bucket_dir.split("=", 1)[1].isdigit()
    ):
        raise NativeWriteError(
            f"Spark wrote {path} outside the layout <{PATH_COLUMN}=...>/<{BUCKET_COLUMN}=...>/"
            "part-<task>-...: its file group is unknown. Help: this is a bug in lakewarden's "
            "Spark writer; nothing was committed."
        )
    escaped = path_dir.split("=", 1)[1]
    # Spark escapes a partition directory's value as %XX (ExternalCatalogUtils): '%' itself
    # included, so percent-decoding gives the value back.
    partition_path = "" if escaped == _SPARK_NULL_PARTITION else unquote(escaped)
    bucket, task = int(bucket_dir.split("=", 1)[1]), int(found.group(1))
    canonical = FileGroupId(partition_path=partition_path, file_id=bucket_file_id(bucket))
    group = append_group(canonical, instant, task)
    return partition_path, BaseFileName(group.file_id, WriteToken(task, 0, 0), instant).render()


def _identity(path: Path, meta: pq.FileMetaData) -> tuple[str, str]:
    """(partition path, file name) from the file's meta columns, which hold one value each.

    Raises: NativeWriteError."""
    values: dict[str, set[str]] = {META_PARTITION_PATH: set(), META_FILE_NAME: set()}
    for group in range(meta.num_row_groups):
        row_group = meta.row_group(group)
        for column in range(row_group.num_columns):
            chunk = row_group.column(column)
            if chunk.path_in_schema in values:
                stats = chunk.statistics
                if stats is None or not stats.has_min_max:
                    return _identity_from_rows(path)
                values[chunk.path_in_schema].update((str(stats.min), str(stats.max)))
    found = {name: sorted(v) for name, v in values.items()}
    if any(len(v) != 1 for v in found.values()):
        raise NativeWriteError(
            f"Spark wrote {path} with meta columns {found}: one value each was expected. "
            "Help: this is a bug in lakewarden's Spark writer; nothing was committed."
        )
    return found[META_PARTITION_PATH][0], found[META_FILE_NAME][0]


def _identity_from_rows(path: Path) -> tuple[str, str]:
    """``_identity`` for a file without column statistics: read the two meta columns."""
    table = pq.read_table(path, columns=[META_PARTITION_PATH, META_FILE_NAME])
    paths = set(table.column(META_PARTITION_PATH).unique().to_pylist())
    names = set(table.column(META_FILE_NAME).unique().to_pylist())
    if len(paths) != 1 or len(names) != 1:
        raise NativeWriteError(
            f"Spark wrote {path} with partition paths {sorted(paths)} and file names "
            f"{sorted(names)}: one of each was expected. Help: this is a bug in lakewarden's "
            "Spark writer; nothing was committed."
        )
    return str(paths.pop()), str(names.pop())
