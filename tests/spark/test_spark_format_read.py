"""``spark.read.format("lakewarden")``: snapshot reads by Spark's own Parquet reader (the
format's JVM side, ``lakewarden/spark/java/``) where a read manifest vouches for the snapshot,
the Python source otherwise; always the rows of ``lakewarden.read`` (the Python reader)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _spark_helpers import SCHEMA, rows, sorted_rows, spark_rows

import lakewarden
from lakewarden.api.table import Table
from lakewarden.table import read_manifest

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _table(uri: str, table_type: str = "cow") -> Table:
    return Table.create(
        uri,
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        ordering_field="ts",
        buckets=2,
        table_type=table_type,  # type: ignore[arg-type]
    )


def _read(spark: Any, uri: str, **options: str) -> Any:
    reader = spark.read.format("lakewarden")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(uri)


def _native(df: Any) -> bool:
    """Whether Spark's Parquet reader scans the table (not the Python source)."""
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert ("ParquetScan" in plan) != ("(Python)" in plan), plan
    return "ParquetScan" in plan


def _same(df: Any, expected: pa.Table) -> None:
    assert df.columns == SCHEMA.names
    assert spark_rows(df) == sorted_rows(expected)


def test_copy_on_write_after_upserts_deletes_and_clustering(spark: Any, tmp_path: Path) -> None:
    table = _table(str(tmp_path / "cow"))
    uri = table.uri
    first = table.write(rows(range(30)), "insert").instant
    table.write(rows(range(20, 40), ts=2, note="v2"), "upsert")
    table.write(rows([1, 2, 25]), "delete")
    table.write(rows(range(40, 45)), "insert")  # a second slice in some buckets

    latest = _read(spark, uri)
    assert _native(latest)
    _same(latest, lakewarden.read(uri))

    plan = table.schedule_clustering(sort_by=["amount"])
    assert plan is not None
    table.run_table_service(plan)
    clustered = _read(spark, uri)
    assert _native(clustered)
    _same(clustered, lakewarden.read(uri))
    agg = clustered.selectExpr("count(*) AS n", "sum(amount) AS s").first()
    assert agg.n == lakewarden.read(uri).num_rows

    old = _read(spark, uri, as_of=first)
    _same(old, lakewarden.read(uri, as_of=first))

    narrowed = _read(spark, uri, columns="amount,id")
    assert _native(narrowed)
    assert narrowed.columns == ["amount", "id"]
    assert sorted(r.id for r in narrowed.collect()) == sorted(
        lakewarden.read(uri)["id"].to_pylist()
    )


def test_as_of_the_previous_commit_is_native(spark: Any, tmp_path: Path) -> None:
    table = _table(str(tmp_path / "t"))
    table.write(rows(range(10)), "insert")
    second = table.write(rows(range(5, 15), ts=2, note="v2"), "upsert").instant
    table.write(rows([6, 7]), "delete")

    old = _read(spark, table.uri, as_of=second)
    assert _native(old)
    _same(old, lakewarden.read(table.uri, as_of=second))


def test_merge_on_read_with_log_blocks_falls_back_then_compaction_is_native(
    spark: Any, tmp_path: Path
) -> None:
    table = _table(str(tmp_path / "mor"), table_type="mor")
    uri = table.uri
    table.write(rows(range(30)), "insert")
    table.write(rows(range(20, 40), ts=2, note="v2"), "upsert")
    table.write(rows([3, 4, 21]), "delete")

    pending = _read(spark, uri)
    assert not _native(pending)  # log blocks to merge: the Python source
    _same(pending, lakewarden.read(uri))

    plan = table.schedule_compaction()
    assert plan is not None
    table.run_table_service(plan)
    compacted = _read(spark, uri)
    assert _native(compacted)
    _same(compacted, lakewarden.read(uri))


def test_a_commit_without_a_manifest_is_read_through_python(spark: Any, tmp_path: Path) -> None:
    """A completion after the newest manifest (written by a process that writes none) makes
    the manifest stale: the read must not return its files."""
    table = _table(str(tmp_path / "t"))
    table.write(rows(range(10)), "insert")
    assert _native(_read(spark, table.uri))

    table.timeline_log.after_completed = None  # this process writes no manifest
    table.write(rows(range(5, 15), ts=2, note="v2"), "upsert")
    after = _read(spark, table.uri)
    assert not _native(after)
    _same(after, lakewarden.read(table.uri))


def test_a_changed_table_config_is_read_through_python(spark: Any, tmp_path: Path) -> None:
    table = _table(str(tmp_path / "t"))
    table.write(rows(range(10)), "insert")
    config = tmp_path / "t" / ".lakewarden" / "table.json"
    config.write_bytes(config.read_bytes() + b"\n")  # same table, other bytes
    df = _read(spark, table.uri)
    assert not _native(df)
    _same(df, lakewarden.read(table.uri))


def test_manifest_schema_is_the_python_sources_schema() -> None:
    from lakewarden.spark._arrow import spark_schema

    schema = pa.schema(
        [
            pa.field("a", pa.int8(), nullable=False),
            ("b", pa.int16()),
            ("c", pa.int32()),
            ("d", pa.int64()),
            ("e", pa.float32()),
            ("f", pa.float64()),
            ("g", pa.string()),
            ("h", pa.large_string()),
            ("i", pa.binary()),
            ("j", pa.date32()),
            ("k", pa.timestamp("us", tz="UTC")),
            ("l", pa.timestamp("ms")),
            ("m", pa.decimal128(12, 3)),
            ("n", pa.bool_()),
        ]
    )
    import json

    text = read_manifest.spark_schema_json(schema)
    assert text is not None
    assert json.loads(text) == spark_schema(schema).jsonValue()
    assert read_manifest.spark_schema_json(pa.schema([("x", pa.uint32())])) is None
    assert read_manifest.spark_schema_json(pa.schema([("x", pa.timestamp("ns"))])) is None


def test_a_missing_table_is_a_named_error_with_help(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception) as caught:
        _read(spark, str(tmp_path / "nothing-here")).collect()
    text = str(caught.value)
    assert "NotATableError" in text
    assert "Help:" in text
