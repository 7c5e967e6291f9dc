"""``Table.to_arrow_dataset``: exactly the snapshot's files, read by DuckDB, Polars and pandas."""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from _memstore import MemStorage

from lakewarden.api.table import Table
from lakewarden.table.config import TableConfig, save_new_config
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.reader import UnsupportedSliceError

SCHEMA = pa.schema(
    [pa.field("id", pa.int64(), nullable=False), ("region", pa.string()), ("amount", pa.int64())]
)


def _rows(ids: range, amount: int) -> pa.Table:
    regions = ["eu" if i % 2 else "us" for i in ids]
    return pa.table(
        {"id": list(ids), "region": regions, "amount": [amount] * len(ids)}, schema=SCHEMA
    )


@pytest.fixture
def table(tmp_path: Path) -> Table:
    return Table.create(
        str(tmp_path / "orders"),
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        ordering_field="amount",
        buckets=2,
        coordinator=EmbeddedCoordinator(),
    )


def _by_id(t: pa.Table) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = t.select(SCHEMA.names).sort_by("id").to_pylist()
    return rows


def test_dataset_is_exactly_the_snapshot_files(table: Table, tmp_path: Path) -> None:
    first = table.write(_rows(range(10), 1), operation="upsert")
    table.write(_rows(range(5, 15), 2), operation="upsert")
    # A Parquet file no completed instant names (a zombie's output) must stay invisible.
    stray = tmp_path / "orders" / "region=eu" / "stray.parquet"
    pq.write_table(_rows(range(100, 110), 9), stray)

    latest = table.to_arrow_dataset()
    assert isinstance(latest, ds.FileSystemDataset)
    assert latest.schema == SCHEMA  # the table's columns, no _lw_* meta columns
    assert sorted(latest.files) == sorted(
        str(tmp_path / "orders" / s.path) for s in table.snapshot().base_files()
    )
    assert _by_id(latest.to_table()) == _by_id(table.read())
    assert latest.count_rows() == 15

    before = table.to_arrow_dataset(as_of=first.instant)  # time travel
    assert _by_id(before.to_table()) == _by_id(_rows(range(10), 1))
    # A filter on the partition column skips the other partition's files.
    eu = before.to_table(filter=ds.field("region") == "eu")
    assert set(eu.column("region").to_pylist()) == {"eu"}


def test_duckdb_polars_and_pandas_read_it(table: Table) -> None:
    table.write(_rows(range(20), 3), operation="upsert")
    orders = table.to_arrow_dataset()

    total = duckdb.sql("select region, sum(amount) as s from orders group by region order by 1")
    assert total.fetchall() == [("eu", 30), ("us", 30)]
    frame = pl.scan_pyarrow_dataset(orders).filter(pl.col("id") >= 15).collect()
    assert sorted(frame["id"].to_list()) == [15, 16, 17, 18, 19]
    assert len(orders.to_table().to_pandas()) == 20


def test_empty_table_and_merge_on_read_table(table: Table) -> None:
    assert table.to_arrow_dataset().count_rows() == 0
    config = TableConfig.new(name="mor", record_key="id", schema=SCHEMA, table_type="mor")
    storage = MemStorage()
    save_new_config(storage, config)
    mor = Table(storage, config, coordinator=EmbeddedCoordinator())
    with pytest.raises(UnsupportedSliceError, match="merge-on-read.*Help: read it with"):
        mor.to_arrow_dataset()
