"""``lakewarden.spark.read``: Spark's own Parquet reader over the files the timeline names,
checked against the Python read of the same table (``Table.read`` / ``Table.changes``)."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _spark_helpers import SCHEMA, rows, sorted_rows, spark_rows

import lakewarden.spark
from lakewarden.api.table import Table
from lakewarden.settings import Settings
from lakewarden.spark import InvalidOptionError
from lakewarden.spark._fast_read import directory_partitioning
from lakewarden.table.config import TableConfig
from lakewarden.table.reader import ColumnNotFoundError
from lakewarden.table.stats import FileGroupId, WriteStat

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _table(uri: str, *, table_type: str = "cow", settings: Settings | None = None) -> Table:
    return Table.create(
        uri,
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        ordering_field="ts",
        buckets=2,
        table_type=table_type,  # type: ignore[arg-type]
        settings=settings,
    )


def _history(table: Table) -> list[str]:
    """Three commits: an insert, an upsert of some keys, a delete; their instants."""
    first = table.write(rows(range(30)), "insert").instant
    second = table.write(rows(range(20, 40), ts=2, note="v2"), "upsert").instant
    third = table.write(rows([1, 2, 25]), "delete").instant
    return [first, second, third]


def _input_files(df: Any) -> set[str]:
    return {path.rsplit("/", 1)[-1] for path in df.inputFiles()}


def _snapshot_files(table: Table, as_of: str | None = None) -> set[str]:
    return {s.base_file.path.rsplit("/", 1)[-1] for s in table.snapshot(as_of).slices.values()}


def test_snapshot_as_of_and_since_match_the_python_read(spark: Any, tmp_path: Path) -> None:
    table = _table(str(tmp_path / "t"))
    first, second, _ = _history(table)
    uri = table.uri

    latest = lakewarden.spark.read(spark, uri)
    assert spark_rows(latest) == sorted_rows(table.read())
    assert latest.columns == SCHEMA.names
    # Spark reads exactly the snapshot's files, natively (no Python source in the plan).
    assert _input_files(latest) == _snapshot_files(table)
    assert "PythonDataSource" not in latest._jdf.queryExecution().toString()

    old = lakewarden.spark.read(spark, uri, as_of=first)
    assert spark_rows(old) == sorted_rows(table.read(as_of=first))
    assert _input_files(old) == _snapshot_files(table, first)

    changed = lakewarden.spark.read(spark, uri, since=first)
    assert spark_rows(changed) == sorted_rows(table.changes(first))
    assert {r["id"] for r in spark_rows(changed)} == set(range(20, 40)) - {25}
    assert spark_rows(lakewarden.spark.read(spark, uri, since=second)) == []

    # Spark's own aggregate and the format's Python read agree.
    total = latest.agg({"amount": "sum"}).first()[0]
    assert total == pytest.approx(sum(table.read().column("amount").to_pylist()))
    assert spark_rows(spark.read.format("lakewarden").load(uri)) == spark_rows(latest)


def test_a_filter_on_the_partition_column_prunes_files_and_columns_narrow(
    spark: Any, tmp_path: Path
) -> None:
    table = _table(str(tmp_path / "t"))
    _history(table)
    df = lakewarden.spark.read(spark, table.uri).where("region = 'us'")
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "PartitionFilters: [isnotnull(region" in plan and "= us)]" in plan
    expected = [r for r in sorted_rows(table.read()) if r["region"] == "us"]
    assert spark_rows(df) == expected

    narrow = lakewarden.spark.read(spark, table.uri, columns=["id", "amount"])
    assert narrow.columns == ["id", "amount"]
    assert sorted(narrow.collect()) == sorted(
        (r["id"], r["amount"]) for r in sorted_rows(table.read())
    )
    with pytest.raises(ColumnNotFoundError, match="no columns"):
        lakewarden.spark.read(spark, table.uri, columns=["nope"])
    with pytest.raises(InvalidOptionError, match="exclude each other"):
        lakewarden.spark.read(spark, table.uri, as_of="1", since="1")


def test_merge_on_read_slices_with_log_blocks_are_merged_in_python(
    spark: Any, tmp_path: Path
) -> None:
    table = _table(str(tmp_path / "t"), table_type="mor")
    first = table.write(rows(range(30)), "insert").instant
    # Keys of one region only: the other region's slices keep no log block (plain Parquet).
    table.write(rows([3, 6, 9], ts=2, note="v2"), "upsert")
    table.write(rows([12]), "delete")
    merged = [s for s in table.snapshot().slices.values() if s.log_files]
    plain = [s for s in table.snapshot().slices.values() if not s.log_files]
    assert merged and plain

    df = lakewarden.spark.read(spark, table.uri)
    assert spark_rows(df) == sorted_rows(table.read())
    assert _input_files(df) >= {s.base_file.path.rsplit("/", 1)[-1] for s in plain}
    assert spark_rows(lakewarden.spark.read(spark, table.uri, since=first)) == sorted_rows(
        table.changes(first)
    )
    assert spark_rows(lakewarden.spark.read(spark, table.uri, as_of=first)) == sorted_rows(
        table.read(as_of=first)
    )


def test_an_empty_table_and_the_default_partition(spark: Any, tmp_path: Path) -> None:
    table = _table(str(tmp_path / "t"))
    empty = lakewarden.spark.read(spark, table.uri)
    assert empty.columns == SCHEMA.names and empty.count() == 0

    # null and '' share the default partition's directory: Spark reads region from the files.
    data = rows(range(6)).set_column(1, "region", pa.array(["eu", None, "", "us", None, ""]))
    table.write(data, "insert")
    assert not directory_partitioning(table.config, _stats(table))
    assert spark_rows(lakewarden.spark.read(spark, table.uri)) == sorted_rows(table.read())


def _stats(table: Table) -> list[WriteStat]:
    return [s.base_file for s in table.snapshot().slices.values() if s.base_file is not None]


def test_every_flat_type_reads_as_the_python_source_reads_it(spark: Any, tmp_path: Path) -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int32(), nullable=False),
            ("day", pa.date32()),
            ("small", pa.int16()),
            ("at", pa.timestamp("us")),
            ("at_utc", pa.timestamp("us", tz="UTC")),
            ("price", pa.decimal128(12, 3)),
            ("ok", pa.bool_()),
            ("blob", pa.binary()),
            ("ratio", pa.float32()),
        ]
    )
    table = Table.create(
        str(tmp_path / "t"), name="typed", record_key="id", schema=schema, partition_by=["day"]
    )
    when = dt.datetime(2026, 1, 2, 3, 4, 5, 678901)
    table.write(
        pa.table(
            {
                "id": [1, 2, 3],
                "day": [dt.date(2026, 1, 1), dt.date(2026, 1, 2), None],
                "small": [1, None, -3],
                "at": [when, None, when],
                "at_utc": [when.replace(tzinfo=dt.UTC), None, None],
                "price": [decimal.Decimal("1.250"), None, decimal.Decimal("-9.001")],
                "ok": [True, False, None],
                "blob": [b"\x00\x01", None, b""],
                "ratio": [0.5, None, 2.0],
            },
            schema=schema,
        ),
        "insert",
    )
    assert directory_partitioning(table.config, _stats(table))
    fast = lakewarden.spark.read(spark, table.uri)
    python = spark.read.format("lakewarden").load(table.uri)
    # The same types (Spark's file sources make every column nullable).
    assert [(f.name, f.dataType) for f in fast.schema] == [
        (f.name, f.dataType) for f in python.schema
    ]
    assert sorted(fast.collect()) == sorted(python.collect())
    assert fast.where("day = date'2026-01-02'").select("id").collect() == [(2,)]


def test_directory_partitioning_only_where_spark_parses_the_values_back() -> None:
    def config(column_type: pa.DataType) -> TableConfig:
        schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("p", column_type)])
        return TableConfig.new(name="t", record_key="id", schema=schema, partition_by=["p"])

    def stat(partition_path: str) -> WriteStat:
        group = FileGroupId(partition_path=partition_path, file_id="f")
        path = f"{partition_path}/f.parquet"
        return WriteStat(file_group=group, path=path, base_instant="1", num_records=1, size_bytes=1)

    assert directory_partitioning(config(pa.string()), [stat("p=a%2Fb")])
    assert directory_partitioning(config(pa.int32()), [stat("p=__HIVE_DEFAULT_PARTITION__")])
    assert not directory_partitioning(config(pa.string()), [stat("p=__HIVE_DEFAULT_PARTITION__")])
    assert not directory_partitioning(config(pa.bool_()), [stat("p=true")])
    assert not directory_partitioning(config(pa.string()), [stat("q=a")])
    unpartitioned = TableConfig.new(name="t", record_key="id", schema=SCHEMA)
    assert not directory_partitioning(unpartitioned, [])


def test_on_s3_spark_reads_the_files_through_s3a(
    spark: Any, s3_settings: Settings, s3_bucket: str, tmp_path: Path
) -> None:
    table = _table(f"s3://{s3_bucket}/fast-read/{tmp_path.name}", settings=s3_settings)
    first, _, _ = _history(table)
    df = lakewarden.spark.read(spark, table.uri, settings=s3_settings)
    assert all(path.startswith("s3a://") for path in df.inputFiles())
    assert spark_rows(df) == sorted_rows(table.read())
    changed = lakewarden.spark.read(spark, table.uri, since=first, settings=s3_settings)
    assert spark_rows(changed) == sorted_rows(table.changes(first))
