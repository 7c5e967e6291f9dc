"""``bulk_insert`` through Spark's own Parquet writer (``lakewarden.spark._native``).

The files must be what the Python Data Source path writes (same rows, same meta columns, same
file groups and names' shape), committed through the same instant protocol, and only the
promoted task attempt's files may become visible.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from _spark_helpers import (
    committed_files,
    files_on_disk,
    make_table,
    rows,
    sorted_rows,
    spark_df,
    states,
)

import lakewarden
import lakewarden.spark
from lakewarden.settings import ErrorTableSettings, Settings
from lakewarden.spark import InvalidOptionError, SparkWriteError
from lakewarden.table.bucket import bucket_prefix
from lakewarden.table.config import (
    FORMAT_VERSION,
    META_COLUMNS,
    META_FILE_NAME,
    META_PARTITION_PATH,
)
from lakewarden.table.files import BaseFileName
from lakewarden.table.instant import Transition
from lakewarden.testing.faults import fault_plan, first_attempt

pytestmark = pytest.mark.spark


def _meta_rows(table: lakewarden.Table) -> list[dict[str, Any]]:
    """The record key text and partition path of every committed row, with its id, as the
    table's reader gives them (format version 2 files do not store the partition path)."""
    read = lakewarden.read(table.uri, columns=["id", *META_COLUMNS[1:3]])
    return sorted(read.to_pylist(), key=lambda row: int(row["id"]))


@pytest.mark.parametrize("version", [1, FORMAT_VERSION])
def test_native_bulk_insert_writes_what_the_python_path_writes(
    spark: Any, tmp_path: Path, version: int
) -> None:
    data = rows(range(300))
    native = make_table(tmp_path / "native", format_version=version)
    python = make_table(tmp_path / "python", format_version=version)
    done = lakewarden.spark.write(
        spark_df(spark, data), native.uri, "bulk_insert", options={"writer": "spark"}
    )
    lakewarden.spark.write(
        spark_df(spark, data), python.uri, "bulk_insert", options={"writer": "python"}
    )

    assert states(native) == [Transition.COMPLETED]
    assert sorted_rows(lakewarden.read(native.uri)) == sorted_rows(data)
    # The meta columns (record key text, partition path) are the Python path's.
    assert _meta_rows(native) == _meta_rows(python)
    assert files_on_disk(tmp_path / "native") == committed_files(native)
    stats = done.stats.write_stats
    assert sum(s.num_records for s in stats) == 300 == sum(s.num_inserts for s in stats)
    by_file = lakewarden.read(native.uri, columns=list(META_COLUMNS[2:]))
    for stat in stats:
        name = BaseFileName.parse(stat.path.rsplit("/", 1)[-1])
        assert name.file_id == stat.file_group.file_id and name.instant == done.instant
        assert bucket_prefix(name.file_id) is not None  # an append group of a bucket
        assert str(name.write_token).endswith("-0-0")
        file = pq.read_table(tmp_path / "native" / stat.path, partitioning=None)
        assert file.num_rows == stat.num_records
        # What the file stores (read without lakewarden), and what readers give for it.
        assert file.schema.names == native.config.stored_schema.names
        # A file name is unique within its partition: the key is both.
        mine = by_file.filter(
            (pc.field(META_PARTITION_PATH) == stat.file_group.partition_path)
            & (pc.field(META_FILE_NAME) == name.render())
        )
        assert mine.num_rows == stat.num_records
        if version == 1:
            assert set(file.column(META_FILE_NAME).to_pylist()) == {name.render()}
    # An upsert after it merges the append groups, as after a Python-path bulk_insert.
    lakewarden.spark.write(spark_df(spark, rows(range(0, 300, 2), ts=2, note="v2")), native.uri)
    expected = {r["id"]: r for r in sorted_rows(data)}
    expected.update({r["id"]: r for r in sorted_rows(rows(range(0, 300, 2), ts=2, note="v2"))})
    assert sorted_rows(lakewarden.read(native.uri)) == sorted(
        expected.values(), key=lambda r: r["id"]
    )


def test_python_source_fills_the_virtual_meta_columns_of_a_version_2_table(
    spark: Any, tmp_path: Path
) -> None:
    """A schema given to ``spark.read.format("lakewarden")`` sends the read to the Python
    source (the JVM side plans only the schema it infers). A format version 2 file does not
    store ``_lw_partition_path`` nor ``_lw_file_name``: the source fills them from the file's
    key, with the values ``lakewarden.read`` gives, for files of Spark's writer and Python's,
    with and without a ``filters`` option, which may itself name them."""
    table = make_table(tmp_path / "t", format_version=FORMAT_VERSION)
    assert set(table.config.virtual_columns) == {META_PARTITION_PATH, META_FILE_NAME}
    data = rows(range(60))
    lakewarden.spark.write(
        spark_df(spark, data), table.uri, "bulk_insert", options={"writer": "spark"}
    )
    table.write(rows(range(40, 80), ts=2, note="v2"), "upsert")
    columns = [META_PARTITION_PATH, META_FILE_NAME, "id", "region"]
    schema = f"{META_PARTITION_PATH} string, {META_FILE_NAME} string, id long, region string"

    def spark_read(**options: str) -> list[dict[str, Any]]:
        reader = spark.read.format("lakewarden").schema(schema)
        for key, value in options.items():
            reader = reader.option(key, value)
        return sorted((r.asDict() for r in reader.load(table.uri).collect()), key=str)

    expected = lakewarden.read(table.uri, columns=columns).to_pylist()
    assert {r[META_PARTITION_PATH] for r in expected} == {"region=eu", "region=us"}
    assert all(r[META_PARTITION_PATH] == f"region={r['region']}" for r in expected)
    assert spark_read() == sorted(expected, key=str)
    only_us = json.dumps([["region", "=", "us"]])
    us = sorted((r for r in expected if r["region"] == "us"), key=str)
    assert spark_read(filters=only_us) == us
    # A filter may name a column the files leave out: it is filled before the filter runs.
    by_path = json.dumps([[META_PARTITION_PATH, "=", "region=us"]])
    assert spark_read(filters=by_path) == us


@pytest.mark.parametrize("partitioned", [True, False])
def test_native_file_names_come_from_spark_directories(
    spark: Any, tmp_path: Path, partitioned: bool
) -> None:
    """A format version 2 file is named from Spark's hidden partition directories, whose
    values Spark escapes ('/', '=', '%'; an unpartitioned table's empty path is Hive's
    default partition): the names and partition paths are the Python path's."""
    data = rows(range(60))
    regions = ["us/west=1", "a%41b", "eu", "x y"]
    data = data.set_column(1, "region", pa.array([regions[i % 4] for i in range(60)]))
    native = make_table(tmp_path / "native", partitioned=partitioned)
    python = make_table(tmp_path / "python", partitioned=partitioned)
    done = lakewarden.spark.write(
        spark_df(spark, data), native.uri, "bulk_insert", options={"writer": "spark"}
    )
    lakewarden.spark.write(
        spark_df(spark, data), python.uri, "bulk_insert", options={"writer": "python"}
    )
    assert sorted_rows(lakewarden.read(native.uri)) == sorted_rows(data)
    assert _meta_rows(native) == _meta_rows(python)
    paths = {s.file_group.partition_path for s in done.stats.write_stats}
    assert paths == (
        {"region=us%2Fwest%3D1", "region=a%2541b", "region=eu", "region=x y"}
        if partitioned
        else {""}
    )
    assert files_on_disk(tmp_path / "native") == committed_files(native)


def test_a_failed_attempt_is_retried_and_never_duplicates(spark: Any, tmp_path: Path) -> None:
    table = make_table(tmp_path / "t", partitioned=False)
    data = rows(range(200))
    with fault_plan(first_attempt(0)):  # Spark writes: the fault comes from a pass-through UDF
        lakewarden.spark.write(
            spark_df(spark, data), table.uri, "bulk_insert", options={"writer": "spark"}
        )
    assert sorted_rows(lakewarden.read(table.uri)) == sorted_rows(data)
    assert files_on_disk(tmp_path / "t") == committed_files(table)


def test_a_value_that_does_not_fit_rolls_the_write_back(spark: Any, tmp_path: Path) -> None:
    table = lakewarden.Table.create(
        str(tmp_path / "t"),
        name="narrow",
        record_key="id",
        schema=pa.schema([pa.field("id", pa.int64(), nullable=False), ("qty", pa.int32())]),
    )
    df = spark.createDataFrame([(1, 5), (2, 2**40)], "id bigint, qty bigint")
    with pytest.raises(SparkWriteError, match="qty") as caught:
        lakewarden.spark.write(df, table.uri, "bulk_insert", options={"writer": "spark"})
    assert "record key 2" in str(caught.value)
    assert states(table)[-1] is Transition.ROLLED_BACK
    # The instant, a literal column of the write (``_native_columns``), is in the message.
    assert f"instant {table.timeline()[-1].instant} of table" in str(caught.value)
    assert files_on_disk(tmp_path / "t") == set()
    assert lakewarden.read(table.uri).num_rows == 0


def test_writer_option_is_checked(spark: Any, tmp_path: Path) -> None:
    table = make_table(tmp_path / "t")
    df = spark_df(spark, rows(range(3)))
    with pytest.raises(InvalidOptionError, match="auto, spark or python"):
        lakewarden.spark.write(df, table.uri, "bulk_insert", options={"writer": "jvm"})
    errors_on = Settings(error_table=ErrorTableSettings(enabled=True))
    with pytest.raises(InvalidOptionError, match="error table"):
        lakewarden.spark.write(
            df, table.uri, "bulk_insert", settings=errors_on, options={"writer": "spark"}
        )
    assert states(table) == []
