"""Delta checkpoints: every ``checkpoint_interval`` versions, the table's whole state as of
that version in one Parquet file, so readers do not replay the whole log.

The checkpoint of version ``v`` (``_delta_log/<v>.checkpoint.parquet``, the protocol's
classic single-file checkpoint) has one row per action, each in its own struct column
(``protocol``, ``metaData``, ``txn``, ``add``, ``remove``; the others null): the protocol, the
metadata, lakewarden's ``txn``, an ``add`` for every live file and a ``remove`` tombstone for
every file removed so far. It is derived from the published JSON versions, never from the
timeline, so it says exactly what the versions up to ``v`` say. It is written create-if-absent
and then ``_last_checkpoint`` is pointed at it (a hint: only ever moved forward by this
writer; readers fall back to listing). A checkpoint is an optimisation: a failure to write one
is logged and publishing goes on.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakewarden.errors import LakewardenError
from lakewarden.storage import AlreadyExistsError, NotFoundError, Storage
from lakewarden.table.config import TableConfig

from .log import LAST_CHECKPOINT_KEY, checkpoint_key, last_checkpoint, version_key

log = logging.getLogger(__name__)

_MAP = pa.map_(pa.string(), pa.string())
_SCHEMA = pa.schema(
    [
        pa.field(
            "txn",
            pa.struct(
                [("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())]
            ),
        ),
        pa.field(
            "add",
            pa.struct(
                [
                    ("path", pa.string()),
                    ("partitionValues", _MAP),
                    ("size", pa.int64()),
                    ("modificationTime", pa.int64()),
                    ("dataChange", pa.bool_()),
                    ("stats", pa.string()),
                    ("tags", _MAP),
                ]
            ),
        ),
        pa.field(
            "remove",
            pa.struct(
                [
                    ("path", pa.string()),
                    ("deletionTimestamp", pa.int64()),
                    ("dataChange", pa.bool_()),
                    ("extendedFileMetadata", pa.bool_()),
                    ("partitionValues", _MAP),
                    ("size", pa.int64()),
                ]
            ),
        ),
        pa.field(
            "metaData",
            pa.struct(
                [
                    ("id", pa.string()),
                    ("name", pa.string()),
                    ("description", pa.string()),
                    (
                        "format",
                        pa.struct([("provider", pa.string()), ("options", _MAP)]),
                    ),
                    ("schemaString", pa.string()),
                    ("partitionColumns", pa.list_(pa.string())),
                    ("configuration", _MAP),
                    ("createdTime", pa.int64()),
                ]
            ),
        ),
        pa.field(
            "protocol",
            pa.struct(
                [
                    ("minReaderVersion", pa.int32()),
                    ("minWriterVersion", pa.int32()),
                    ("readerFeatures", pa.list_(pa.string())),
                    ("writerFeatures", pa.list_(pa.string())),
                ]
            ),
        ),
    ]
)


def due_checkpoint(storage: Storage, config: TableConfig, published: int) -> int | None:
    """The version whose checkpoint is due with ``published`` the newest version: the newest
    multiple of the interval, unless ``_last_checkpoint`` names it (or a later one)."""
    interval = config.publish.checkpoint_interval
    if interval <= 0 or published < interval:
        return None
    due = published - published % interval
    current = last_checkpoint(storage)
    return None if current is not None and current >= due else due


def _unmaps(value: Any) -> Any:
    """A row read back from a checkpoint, with maps as dicts and no null fields."""
    if isinstance(value, dict):
        return {k: _unmaps(v) for k, v in value.items() if v is not None}
    if isinstance(value, list) and value and isinstance(value[0], tuple):
        return dict(value)
    return value


def checkpoint_state(storage: Storage, version: int) -> dict[str, Any] | None:
    """The state a checkpoint of ``version`` holds, None when there is none."""
    try:
        table = pq.read_table(pa.BufferReader(storage.read(checkpoint_key(version))))
    except (NotFoundError, OSError, pa.ArrowException):
        return None
    state: dict[str, Any] = {"adds": {}, "removes": {}}
    for row in table.to_pylist():
        name, action = next((k, v) for k, v in row.items() if v is not None)
        action = _unmaps(action)
        if name in ("add", "remove"):
            state[f"{name}s"][action["path"]] = action
        else:
            state[name] = action
    return state


def _state_as_of(storage: Storage, version: int, previous: int | None) -> dict[str, Any]:
    """The reconciled actions of versions 0..``version``: the checkpoint of ``previous``
    when it exists, then the JSON versions after it."""
    state = checkpoint_state(storage, previous) if previous is not None else None
    start = (previous or 0) + 1 if state is not None else 0
    if state is None:
        state = {"adds": {}, "removes": {}}
    for v in range(start, version + 1):
        for line in storage.read(version_key(v)).decode("utf-8").splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "protocol" in action:
                state["protocol"] = action["protocol"]
            elif "metaData" in action:
                state["metaData"] = action["metaData"]
            elif "txn" in action:
                state["txn"] = action["txn"]
            elif "add" in action:
                add = action["add"]
                state["removes"].pop(add["path"], None)
                state["adds"][add["path"]] = add
            elif "remove" in action:
                remove = action["remove"]
                state["adds"].pop(remove["path"], None)
                state["removes"][remove["path"]] = remove
    return state


def _maps(action: dict[str, Any], *names: str) -> dict[str, Any]:
    out = dict(action)
    for name in names:
        if isinstance(out.get(name), dict):
            out[name] = list(out[name].items())
    return out


def _rows(state: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [{"protocol": state["protocol"]}]
    meta = dict(state["metaData"])
    meta["format"] = _maps(meta["format"], "options")
    rows.append({"metaData": _maps(meta, "configuration")})
    if "txn" in state:
        rows.append({"txn": state["txn"]})
    for path in sorted(state["adds"]):
        rows.append({"add": _maps(state["adds"][path], "partitionValues", "tags")})
    for path in sorted(state["removes"]):
        rows.append({"remove": _maps(state["removes"][path], "partitionValues")})
    return rows


def checkpoint_bytes(
    storage: Storage, version: int, *, previous: int | None = None
) -> tuple[bytes, int]:
    """The Parquet bytes of the checkpoint of ``version`` and its number of actions, built on
    the checkpoint of ``previous`` when given and present."""
    rows = _rows(_state_as_of(storage, version, previous))
    table = pa.Table.from_pylist(rows, schema=_SCHEMA)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="snappy")
    return sink.getvalue().to_pybytes(), table.num_rows


def write_checkpoint(storage: Storage, config: TableConfig, version: int) -> None:
    """Write the checkpoint of ``version`` if absent and point ``_last_checkpoint`` at it.
    Best effort: a failure is logged."""
    try:
        # Built on the newest checkpoint before it: never deleted by ``retention``, whereas
        # the JSON versions before it may be.
        current = last_checkpoint(storage)
        interval = config.publish.checkpoint_interval
        if current is not None and current < version:
            previous: int | None = current
        else:
            previous = version - interval if version - interval > 0 else None
        data, size = checkpoint_bytes(storage, version, previous=previous)
        try:
            storage.write_if_absent(checkpoint_key(version), data)
        except AlreadyExistsError:
            pass  # a racing publisher wrote it
        current = last_checkpoint(storage)
        if current is None or current < version:
            hint = {"version": version, "size": size}
            storage.write(LAST_CHECKPOINT_KEY, json.dumps(hint).encode())
    except (LakewardenError, OSError, ValueError, pa.ArrowException) as err:
        log.warning("table %s: Delta checkpoint %d not written (%s)", config.name, version, err)
