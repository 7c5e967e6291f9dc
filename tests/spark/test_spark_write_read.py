"""The plain format: insert, bulk_insert and overwrite, then read back; bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _spark_helpers import (
    committed_files,
    files_on_disk,
    make_table,
    rows,
    sorted_rows,
    spark_df,
    spark_rows,
    states,
)

import lakewarden
from lakewarden.table.instant import Transition

pytestmark = pytest.mark.spark


def test_insert_then_read_back_equal(spark: Any, table_dir: Path) -> None:
    table = make_table(table_dir)
    data = rows(range(200))
    spark_df(spark, data, partitions=3).write.format("lakewarden").mode("append").save(
        str(table_dir)
    )

    assert states(table) == [Transition.COMPLETED]
    back = spark.read.format("lakewarden").load(str(table_dir))
    assert spark_rows(back) == sorted_rows(data)
    assert sorted_rows(lakewarden.read(str(table_dir))) == sorted_rows(data)
    # Only committed files are in the table; the committer's work area is gone.
    assert files_on_disk(table_dir) == committed_files(table)


def test_committer_write_options_reach_the_job_commit(spark: Any, table_dir: Path) -> None:
    """``committer.validate_output`` and ``committer.cleanup`` as write options: the job's
    summary records the validation, and its ``_temporary`` directory stays for diagnosis."""
    table = make_table(table_dir)
    writer = spark_df(spark, rows(range(20)), partitions=2).write.format("lakewarden")
    writer = writer.option("committer.validate_output", "true").option("committer.cleanup", "false")
    writer.option("committer.threads", "2").mode("append").save(str(table_dir))
    assert states(table) == [Transition.COMPLETED]
    kept = list((table_dir / "_temporary").rglob("*-manifest.json"))
    assert len(kept) == 2, kept
    [summary] = (table_dir / ".lakewarden" / "jobs").rglob("_SUCCESS")
    validated = json.loads(summary.read_text())["diagnostics"]["validated_files"]
    assert validated == str(len(committed_files(table)))


def test_bulk_insert_appends_and_overwrite_replaces_in_one_instant(
    spark: Any, table_dir: Path
) -> None:
    table = make_table(table_dir)
    uri = str(table_dir)
    writer = spark_df(spark, rows(range(50))).write.format("lakewarden")
    writer.mode("append").option("operation", "bulk_insert").save(uri)
    spark_df(spark, rows(range(50, 80))).write.format("lakewarden").mode("append").save(uri)
    assert spark.read.format("lakewarden").load(uri).count() == 80

    replacement = rows(range(1000, 1010), note="new")
    spark_df(spark, replacement).write.format("lakewarden").mode("overwrite").save(uri)

    assert states(table) == [Transition.COMPLETED] * 3
    assert spark_rows(spark.read.format("lakewarden").load(uri)) == sorted_rows(replacement)
    overwrite = table.timeline()[-1]
    assert overwrite.commit is not None and overwrite.commit.operation == "insert_overwrite_table"


def test_time_travel_incremental_and_column_option(spark: Any, table_dir: Path) -> None:
    table = make_table(table_dir)
    uri = str(table_dir)
    first = lakewarden.spark.write(spark_df(spark, rows(range(20))), uri, "insert")
    lakewarden.spark.write(spark_df(spark, rows(range(10, 30), ts=2, note="v2")), uri, "upsert")

    reader = spark.read.format("lakewarden")
    as_of = reader.option("as_of", first.instant).load(uri)
    assert spark_rows(as_of) == sorted_rows(rows(range(20)))
    since = spark.read.format("lakewarden").option("since", first.instant).load(uri)
    assert spark_rows(since) == sorted_rows(rows(range(10, 30), ts=2, note="v2"))
    narrow = spark.read.format("lakewarden").option("columns", "id,note").load(uri)
    assert narrow.columns == ["id", "note"] and narrow.count() == 30
    assert len(table.timeline()) == 2


def test_upsert_through_the_plain_format_is_refused(spark: Any, table_dir: Path) -> None:
    make_table(table_dir)
    writer = spark_df(spark, rows(range(5))).write.format("lakewarden").mode("append")
    with pytest.raises(Exception, match="lakewarden.spark.write"):
        writer.option("operation", "upsert").save(str(table_dir))


def test_schema_mismatch_fails_before_the_table_is_touched(spark: Any, table_dir: Path) -> None:
    table = make_table(table_dir)
    df = spark_df(spark, rows(range(5))).withColumnRenamed("note", "comment")
    with pytest.raises(Exception, match="SchemaMismatchError") as info:
        df.write.format("lakewarden").mode("append").save(str(table_dir))
    assert "columns not in the table ['comment']" in str(info.value)
    assert table.timeline() == []


def test_null_record_key_fails_the_job_naming_the_row(spark: Any, table_dir: Path) -> None:
    table = make_table(table_dir)
    good = rows(range(10)).to_pylist()
    bad = [*good[:4], {**good[4], "id": None, "note": "the bad one"}, *good[5:]]
    df = spark.createDataFrame(
        bad, schema="id long, region string, ts long, amount double, note string"
    ).coalesce(1)
    with pytest.raises(Exception, match="null record key") as info:
        df.write.format("lakewarden").mode("append").save(str(table_dir))
    assert "row 4" in str(info.value) and "the bad one" in str(info.value)
    assert states(table) == [Transition.ROLLED_BACK]
    assert f"instant {table.timeline()[0].instant}" in str(info.value)
    assert files_on_disk(table_dir) == set()


def test_value_that_does_not_fit_the_table_type_is_named(spark: Any, tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("small", pa.int32())])
    table = lakewarden.Table.create(str(tmp_path), name="t", record_key="id", schema=schema)
    df = spark.createDataFrame([(1, 5), (2, 2**40), (3, 7)], "id long, small long").coalesce(1)
    with pytest.raises(Exception, match="does not fit the table type int32") as info:
        df.write.format("lakewarden").mode("append").save(str(tmp_path))
    assert "row 1" in str(info.value) and str(2**40) in str(info.value)
    assert states(table) == [Transition.ROLLED_BACK]


def test_empty_table_reads_empty_and_an_empty_write_commits(spark: Any, table_dir: Path) -> None:
    table = make_table(table_dir)
    uri = str(table_dir)
    assert spark.read.format("lakewarden").load(uri).count() == 0
    empty = spark_df(spark, rows(range(5))).limit(0)
    empty.write.format("lakewarden").mode("append").save(uri)
    assert states(table) == [Transition.COMPLETED]
    assert spark.read.format("lakewarden").load(uri).count() == 0
