"""Finding every bad row of a batch when the error table is on (no Spark session needed)."""

from __future__ import annotations

import pyarrow as pa

from lakewarden.spark._bad_rows import find_bad_rows
from lakewarden.table.config import TableConfig

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("qty", pa.int32()),
        pa.field("region", pa.string(), nullable=False),
    ]
)
CONFIG = TableConfig.new(name="t", record_key="id", schema=SCHEMA, partition_by=["region"])


def test_clean_batch_has_no_bad_rows() -> None:
    batch = pa.table({"id": [1, 2], "qty": [1, 2], "region": ["eu", "us"]})
    assert find_bad_rows(batch, CONFIG, "insert") == {}


def test_every_bad_row_is_found_with_its_reason() -> None:
    n = 1000
    qty = list(range(n))
    ids: list[int | None] = list(range(n))
    for i in (3, 500, 999):
        qty[i] = 2**40  # does not fit int32
    ids[7] = None
    batch = pa.table(
        {"id": pa.array(ids, pa.int64()), "qty": pa.array(qty, pa.int64()), "region": ["eu"] * n}
    )
    bad = find_bad_rows(batch, CONFIG, "insert")
    assert sorted(bad) == [3, 7, 500, 999]
    assert "does not fit the table type int32" in bad[3]
    assert "null record key" in bad[7]
