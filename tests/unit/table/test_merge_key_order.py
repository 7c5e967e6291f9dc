"""In a merge-on-read table, a base file that an upsert or a compaction rewrites holds its rows
in ascending order of an integer record key, so later reads look the log records up by binary
search (``lakewarden.table.merge.in_key_order``). The files are read back with pyarrow's own
Parquet reader, not lakewarden's; the records a read returns are those of copy-on-write."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lakewarden.api.table import Table
from lakewarden.table.config import TableConfig
from lakewarden.table.merge import in_key_order

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("region", pa.string()),
        pa.field("ts", pa.int64()),
    ]
)
ARGS = {
    "name": "orders",
    "record_key": "id",
    "schema": SCHEMA,
    "partition_by": ["region"],
    "ordering_field": "ts",
    "buckets": 1,
}


def _rows(ids: list[int], ts: int) -> pa.Table:
    return pa.table({"id": ids, "region": ["eu"] * len(ids), "ts": [ts] * len(ids)}, schema=SCHEMA)


def _base_ids(table: Table) -> list[list[int]]:
    """The ids of every base file of the table's snapshot, in file order."""
    root = Path(table.storage.uri.removeprefix("file://"))
    return [
        pq.ParquetFile(root / s.base_file.path).read(columns=["id"]).column("id").to_pylist()
        for s in table.snapshot().slices.values()
        if s.base_file is not None
    ]


def test_sorts_integer_keys_stably_and_leaves_the_rest() -> None:
    config = TableConfig.new(**ARGS)
    records = pa.table({"id": [3, 1, 2, 1], "ts": [0, 1, 2, 3]})
    ordered = in_key_order(records, config)
    assert ordered.column("id").to_pylist() == [1, 1, 2, 3]
    assert ordered.column("ts").to_pylist() == [1, 3, 2, 0], "equal keys keep their order"
    in_order = pa.table({"id": [1, 2, 2, 5]})
    assert in_key_order(in_order, config) is in_order
    with_null = pa.table({"id": pa.array([3, None, 1], pa.int64())})
    assert in_key_order(with_null, config) is with_null
    text_schema = pa.schema([pa.field("id", pa.string()), pa.field("region", pa.string())])
    text = TableConfig.new(**(ARGS | {"schema": text_schema, "ordering_field": None}))
    words = pa.table({"id": ["b", "a"]})
    assert in_key_order(words, text) is words


def test_a_merge_on_read_upsert_and_compaction_write_bases_in_key_order(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "mor"), **(ARGS | {"table_type": "mor"}))
    table.write(_rows(list(range(0, 100, 2)), ts=1), "insert")
    # The first upsert after an insert merges into the canonical base: updates and new keys
    # spread over the key range.
    table.write(_rows([99, 4, 51, 0, 1], ts=2), "upsert")
    (ids,) = _base_ids(table)
    assert ids == sorted(ids) and len(ids) == 53
    table.write(_rows([97, 3, 50], ts=3), "upsert")  # a log block
    instant = table.schedule_compaction()
    assert instant is not None
    table.run_table_service(instant)
    (compacted,) = _base_ids(table)
    assert compacted == sorted(compacted) and len(compacted) == 55
    assert np.array_equal(
        np.sort(table.read().column("id").to_numpy()), np.array(sorted(compacted))
    )


def test_copy_on_write_keeps_the_merge_order(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "cow"), **ARGS)
    table.write(_rows(list(range(0, 100, 2)), ts=1), "insert")
    table.write(_rows([99, 4], ts=2), "upsert")
    (ids,) = _base_ids(table)
    assert ids != sorted(ids), "no sort on copy-on-write: its reads merge nothing"
    assert sorted(ids) == sorted([*range(0, 100, 2), 99])
