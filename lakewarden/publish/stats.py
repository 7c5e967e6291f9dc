"""An ``add`` action's ``stats`` and ``partitionValues``, from a data file's Parquet footer and
its partition path.

Stats (the protocol's "Per-file Statistics") let Delta readers skip files: ``numRecords``,
and per top-level column ``nullCount`` and, where they are exact, ``minValues`` and
``maxValues``. A wrong bound silently drops rows from a reader's result while a missing one only
costs a file read, so bounds are given only for types whose Parquet statistics are exact and
whose JSON form every reader parses the same way: integers, strings and dates. Floats (NaN is
left out of Parquet's bounds), timestamps (Delta's stats keep milliseconds), decimals and
nested columns get ``nullCount`` only (nested: nothing). Partition columns are described by
``partitionValues`` instead, and lakewarden's meta columns not at all.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakewarden.storage import Storage
from lakewarden.table.bucket import parse_partition_path
from lakewarden.table.config import TableConfig


def _bounded(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_date32(t)
    )


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value


def read_footer(storage: Storage, key: str) -> pq.FileMetaData:
    """The Parquet footer of the data file at ``key`` (a local file is read in place; other
    stores read the object)."""
    path = storage.local_path(key)
    if path is not None:
        return pq.read_metadata(path)
    return pq.read_metadata(pa.BufferReader(storage.read(key)))


def file_stats(config: TableConfig, footer: pq.FileMetaData) -> str:
    """The ``stats`` JSON string of a data file of ``config``'s table."""
    columns = _stat_columns(config)
    index = {footer.schema.column(i).path: i for i in range(footer.num_columns)}
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name, bounded in columns:
        i = index.get(name)
        if i is None:
            continue
        found = [footer.row_group(g).column(i).statistics for g in range(footer.num_row_groups)]
        if all(s is not None and s.has_null_count for s in found):
            nulls[name] = sum(s.null_count for s in found if s is not None)
        if not bounded or footer.num_rows == 0:
            continue
        ranged = [s for s in found if s is not None and s.has_min_max]
        if len(ranged) == len(found) and ranged:
            mins[name] = _json_value(min(s.min for s in ranged))
            maxs[name] = _json_value(max(s.max for s in ranged))
    stats = {
        "numRecords": footer.num_rows,
        "minValues": mins,
        "maxValues": maxs,
        "nullCount": nulls,
    }
    return json.dumps(stats, separators=(",", ":"), ensure_ascii=False)


def _stat_columns(config: TableConfig) -> list[tuple[str, bool]]:
    partitions = set(config.partition_by)
    out: list[tuple[str, bool]] = []
    for f in config.pa_schema:
        if f.name in partitions or pa.types.is_nested(f.type):
            continue
        out.append((f.name, _bounded(f.type)))
    return out


def partition_values(config: TableConfig, partition_path: str) -> dict[str, str | None]:
    """``partitionValues`` of a file in ``partition_path``: each partition column's value as
    the text lakewarden's path holds (Delta's partition value serialisation: ``1``, ``abc``,
    ``2024-01-31``, ``true``); the default partition (null or empty) is ``null``."""
    values: Sequence[str | None] = parse_partition_path(partition_path, config.partition_by)
    return dict(zip(config.partition_by, values, strict=True))
