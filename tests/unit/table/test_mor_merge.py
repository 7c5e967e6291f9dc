"""The vectorized slice merge equals the block-by-block fold of ``lakewarden.table.merge``
(an upsert per data block, a delete per delete block), whatever the blocks hold."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from _hypothesis_profiles import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from lakewarden.logfile import BlockType, LogBlock, encode_block, encode_records, scan_log
from lakewarden.table.config import (
    META_COMMIT_TIME,
    META_FILE_NAME,
    META_PARTITION_PATH,
    META_RECORD_KEY,
)
from lakewarden.table.merge import merge
from lakewarden.table.mor_merge import RANGE_ROWS, merge_columns, merge_slice

MERGE_SCHEMA = pa.schema(
    [
        pa.field(META_COMMIT_TIME, pa.string(), nullable=False),
        pa.field(META_RECORD_KEY, pa.string(), nullable=False),
        pa.field(META_PARTITION_PATH, pa.string(), nullable=False),
        pa.field("id", pa.int64()),
        pa.field("ts", pa.int64()),
        pa.field("v", pa.string()),
    ]
)
LOG_PATH = "p=1/.00000000-0000_20240101000000000.log.1_0-0-0"


def records(rows: list[tuple[int, int | None, str]], instant: str) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                META_COMMIT_TIME: instant,
                META_RECORD_KEY: str(key),
                META_PARTITION_PATH: "p=1",
                "id": key,
                "ts": ts,
                "v": v,
            }
            for key, ts, v in rows
        ],
        schema=MERGE_SCHEMA,
    )


def blocks_of(batches: list[tuple[str, pa.Table]]) -> list[LogBlock]:
    data = b""
    for seq, (kind, table) in enumerate(batches):
        header = {"INSTANT_TIME": f"2024010100000{seq:04d}", "BLOCK_SEQUENCE_NO": "0"}
        if kind == "delete":
            keys = table.select([META_COMMIT_TIME, META_RECORD_KEY, META_PARTITION_PATH])
            data += encode_block(BlockType.DELETE, header, encode_records(keys))
        else:
            data += encode_block(BlockType.DATA, header, encode_records(table))
        if seq % 3 == 2:  # command blocks hold no records and change nothing
            data += encode_block(BlockType.COMMAND, header, b"")
    return scan_log(data, LOG_PATH).blocks


def fold(base: pa.Table, batches: list[tuple[str, pa.Table]], ordering: str | None) -> pa.Table:
    state: pa.Table | None = base
    for kind, table in batches:
        operation = "delete" if kind == "delete" else "upsert"
        state = merge(operation, state, table, ordering).table
    return state if state is not None else MERGE_SCHEMA.empty_table()


def rows_of(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


_ROW = st.tuples(
    st.integers(0, 6), st.one_of(st.none(), st.integers(0, 3)), st.text("ab", max_size=2)
)
_BATCH = st.tuples(st.sampled_from(["upsert", "upsert", "delete"]), st.lists(_ROW, max_size=5))


@pytest.mark.parametrize("key", ["id", META_RECORD_KEY])
@pytest.mark.parametrize("ordering", ["ts", None])
@settings(max_examples=examples(25), deadline=None)
@given(base_rows=st.lists(_ROW, max_size=6), batches=st.lists(_BATCH), in_key_order=st.booleans())
def test_the_vectorized_merge_equals_the_block_by_block_fold(
    key: str,
    ordering: str | None,
    base_rows: list[tuple[int, int | None, str]],
    batches: list[tuple[str, list[tuple[int, int | None, str]]]],
    in_key_order: bool,
) -> None:
    if in_key_order:  # a base written in key order: the merge searches it (KeyIndex)
        base_rows = sorted(base_rows, key=lambda row: row[0])
    base = records(base_rows, "20230101000000000")  # an insert keeps duplicate keys
    tables = [
        (kind, records(rows, f"2024010100000{i:04d}")) for i, (kind, rows) in enumerate(batches)
    ]
    got = merge_slice(base, blocks_of(tables), schema=MERGE_SCHEMA, key=key, ordering=ordering)
    assert rows_of(got) == rows_of(fold(base, tables, ordering))


def test_a_projection_carries_the_key_and_ordering_and_names_the_log_file() -> None:
    schema = MERGE_SCHEMA.append(pa.field(META_FILE_NAME, pa.string(), nullable=False))
    carried = merge_columns(schema, ["v", META_FILE_NAME], key="id", ordering="ts")
    assert carried.names == ["id", "ts", "v", META_FILE_NAME]
    base = records([(1, 1, "old"), (2, 1, "kept")], "20230101000000000")
    names = pa.array(["base.parquet"] * 2)
    base = base.append_column(META_FILE_NAME, names).select(carried.names).cast(carried)
    blocks = blocks_of([("upsert", records([(1, 2, "new")], "20240101000000000"))])
    got = merge_slice(base, blocks, schema=carried, key="id", ordering="ts")
    assert sorted(got.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "ts": 2, "v": "new", META_FILE_NAME: LOG_PATH.rpartition("/")[2]},
        {"id": 2, "ts": 1, "v": "kept", META_FILE_NAME: "base.parquet"},
    ]


def test_without_a_base_file_the_blocks_alone_make_the_slice() -> None:
    blocks = blocks_of(
        [
            ("upsert", records([(1, 1, "a"), (2, 1, "b"), (1, 0, "older")], "20240101000000000")),
            ("delete", records([(2, None, "")], "20240101000000001")),
        ]
    )
    got = merge_slice(None, blocks, schema=MERGE_SCHEMA, key="id", ordering="ts")
    assert [(r["id"], r["v"]) for r in got.to_pylist()] == [(1, "a")]


def test_base_ranges_no_log_key_touches_pass_through_uncopied() -> None:
    # 4.5 ranges of base rows; the logs update keys of range 1 and delete one of range 3:
    # ranges 0, 2 and the tail reach the result as slices of the base's own buffers.
    n = 4 * RANGE_ROWS + RANGE_ROWS // 2
    ids = pa.array(range(n), pa.int64())
    base = pa.table(
        {"id": ids, "ts": pa.repeat(pa.scalar(1, pa.int64()), n), "v": pa.repeat(pa.scalar("b"), n)}
    )
    schema = base.schema
    updated = [RANGE_ROWS + 5, RANGE_ROWS + 6, 2 * RANGE_ROWS - 1]
    deleted = 3 * RANGE_ROWS + 7
    upsert = pa.table({"id": updated, "ts": [2, 0, 2], "v": ["new", "older", "new"]}, schema=schema)
    delete = pa.table({META_RECORD_KEY: [str(deleted)]})
    data = encode_block(BlockType.DATA, {"INSTANT_TIME": "1"}, encode_records(upsert))
    data += encode_block(BlockType.DELETE, {"INSTANT_TIME": "2"}, encode_records(delete))
    got = merge_slice(base, scan_log(data, LOG_PATH).blocks, schema=schema, key="id", ordering="ts")

    assert got.num_rows == n - 1
    touched = got.filter(pc.is_in(got.column("id"), pa.array(updated, pa.int64())))
    by_id = {r["id"]: (r["ts"], r["v"]) for r in touched.to_pylist()}
    values = {i: by_id.get(i) for i in updated}
    assert values == {
        RANGE_ROWS + 5: (2, "new"),
        RANGE_ROWS + 6: (1, "b"),
        2 * RANGE_ROWS - 1: (2, "new"),
    }
    assert deleted not in set(got.column("id").to_pylist())
    # The untouched ranges are views of the base: same buffer, their own offset.
    base_buffer = base.column("id").chunk(0).buffers()[1].address
    untouched = [c for c in got.column("id").chunks if c.buffers()[1].address == base_buffer]
    assert [(c.offset, len(c)) for c in untouched] == [
        (0, RANGE_ROWS),
        (2 * RANGE_ROWS, RANGE_ROWS),
        (4 * RANGE_ROWS, RANGE_ROWS // 2),
    ]


def test_updates_spread_over_every_range_cost_one_filter() -> None:
    n = 3 * RANGE_ROWS
    base = pa.table({"id": pa.array(range(n), pa.int64()), "ts": pa.array([1] * n, pa.int64())})
    upsert = pa.table({"id": list(range(0, n, 1000)), "ts": [2] * len(range(0, n, 1000))})
    data = encode_block(BlockType.DATA, {"INSTANT_TIME": "1"}, encode_records(upsert))
    blocks = scan_log(data, LOG_PATH).blocks
    got = merge_slice(base, blocks, schema=base.schema, key="id", ordering="ts")
    assert got.num_rows == n and got.column("id").num_chunks == 2  # the filtered base, the log
    assert sorted(got.column("id").to_pylist()) == list(range(n))
