"""An ``add`` action's ``stats`` and ``partitionValues``, from a data file's Parquet footer and
its partition path.

Stats (the protocol's "Per-file Statistics") let Delta readers skip files: ``numRecords``,
and per top-level column ``nullCount``, ``minValues`` and ``maxValues``. A wrong bound silently
drops rows from a reader's result, so every bound is the Parquet statistic itself or wider:
integers, floats (Parquet leaves NaN out of its bounds, as Delta writers do), booleans,
strings and dates exactly; timestamps in the milliseconds Delta's stats hold, the minimum
rounded down and the maximum up; decimals only when their JSON number is exact. A missing
bound is no better: delta-rs reads a column without bounds as one whose bounds are null and
skips the file for any filter on it, so every column of those types gets bounds when the
footer has them. Partition columns are described by ``partitionValues`` instead, nested
columns not at all, and lakewarden's meta columns never.
"""

from __future__ import annotations

import datetime
import decimal
import io
import json
import math
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakewarden.storage import Storage
from lakewarden.table.bucket import parse_partition_path
from lakewarden.table.config import TableConfig

_UNIT_PER_MS = {"MILLIS": 1, "MICROS": 1_000, "NANOS": 1_000_000}
_EPOCH = datetime.datetime(1970, 1, 1)


class _RangedObject(io.RawIOBase):
    """An object of a Storage as a read-only seekable file: each read is one ranged read
    (``Storage.read_range``), so pyarrow reads a footer without the whole file."""

    def __init__(self, storage: Storage, key: str, size: int) -> None:
        super().__init__()
        self._storage = storage
        self._key = key
        self._size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(base + offset, 0)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self._storage.read_range(self._key, self._pos, min(len(view), self._size))
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)


def read_footer(storage: Storage, key: str) -> pq.FileMetaData:
    """The Parquet footer of the data file at ``key``: a local file is read in place; on other
    stores a size lookup and ranged reads of the file's end (pyarrow reads the last 64 KiB,
    then the rest of a larger footer), never the whole file."""
    path = storage.local_path(key)
    if path is not None:
        return pq.read_metadata(path)
    size = storage.stat(key).size
    with pa.PythonFile(_RangedObject(storage, key, size), mode="r") as file:
        return pq.read_metadata(file)


def file_stats(config: TableConfig, footer: pq.FileMetaData) -> str:
    """The ``stats`` JSON string of a data file of ``config``'s table."""
    index = {footer.schema.column(i).path: i for i in range(footer.num_columns)}
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for field in _stat_columns(config):
        i = index.get(field.name)
        if i is None:
            continue
        found = [footer.row_group(g).column(i).statistics for g in range(footer.num_row_groups)]
        if all(s is not None and s.has_null_count for s in found):
            nulls[field.name] = sum(s.null_count for s in found if s is not None)
        ranged = [s for s in found if s is not None and s.has_min_max]
        if not ranged or not _bounded(field.type):
            continue
        bounds = _bounds(field.type, ranged, footer.schema.column(i))
        if bounds is not None:
            mins[field.name], maxs[field.name] = bounds
    stats = {
        "numRecords": footer.num_rows,
        "minValues": mins,
        "maxValues": maxs,
        "nullCount": nulls,
    }
    return json.dumps(stats, separators=(",", ":"), ensure_ascii=False)


def _stat_columns(config: TableConfig) -> list[pa.Field]:
    partitions = set(config.partition_by)
    return [
        f for f in config.pa_schema if f.name not in partitions and not pa.types.is_nested(f.type)
    ]


def _bounded(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_boolean(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_date32(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_decimal(t)
    )


def _bounds(t: pa.DataType, found: Sequence[Any], column: Any) -> tuple[Any, Any] | None:
    """The JSON min and max of a column over its row groups' statistics; None when no bound
    can be given exactly or wider."""
    if pa.types.is_timestamp(t):
        return _timestamp_bounds(t, found, column)
    low, high = min(s.min for s in found), max(s.max for s in found)
    if pa.types.is_decimal(t):
        exact = all(decimal.Decimal(repr(float(v))) == v for v in (low, high))
        return (float(low), float(high)) if exact else None
    if pa.types.is_floating(t) and not all(math.isfinite(v) for v in (low, high)):
        return None
    if isinstance(low, datetime.date):
        return low.isoformat(), high.isoformat()
    return low, high


def _timestamp_bounds(t: pa.DataType, found: Sequence[Any], column: Any) -> tuple[str, str] | None:
    if column.physical_type != "INT64":
        return None
    unit = column.logical_type.to_json().upper()
    per_ms = next((v for k, v in _UNIT_PER_MS.items() if k in unit), None)
    if per_ms is None:
        return None
    low = min(s.min_raw for s in found) // per_ms  # rounded down
    high = -(-max(s.max_raw for s in found) // per_ms)  # rounded up
    return _timestamp_text(t, low), _timestamp_text(t, high)


def _timestamp_text(t: pa.DataType, epoch_ms: int) -> str:
    text = (_EPOCH + datetime.timedelta(milliseconds=epoch_ms)).isoformat(timespec="milliseconds")
    return text + "Z" if t.tz is not None else text.replace("T", " ")


def partition_values(config: TableConfig, partition_path: str) -> dict[str, str | None]:
    """``partitionValues`` of a file in ``partition_path``: each partition column's value as
    the text lakewarden's path holds (Delta's partition value serialisation: ``1``, ``abc``,
    ``2024-01-31``, ``true``); the default partition (null or empty) is ``null``."""
    values: Sequence[str | None] = parse_partition_path(partition_path, config.partition_by)
    return dict(zip(config.partition_by, values, strict=True))
