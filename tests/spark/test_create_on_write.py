"""Create on first write: the table options of the format, the helper and the stream writer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _spark_helpers import SCHEMA, make_table, rows, sorted_rows, spark_df, spark_rows

import lakewarden
import lakewarden.spark
from lakewarden.api.table import Table
from lakewarden.spark._create import (
    TableOptions,
    TableOptionsMismatchError,
    default_table_name,
    ensure_table,
)
from lakewarden.spark._options import InvalidOptionError
from lakewarden.storage import Storage, open_storage
from lakewarden.table.config import InvalidTableConfigError, NotATableError, load_config

CREATE = {
    "record_key": "id",
    "partition_by": "region",
    "ordering_field": "ts",
    "buckets": "2",
}


# -- the options, without Spark ----------------------------------------------------------------


@pytest.fixture
def storage(tmp_path: Path) -> Storage:
    return open_storage(str(tmp_path / "orders"))


def test_options_parse_and_create_a_config_with_a_non_null_key(storage: Storage) -> None:
    options = TableOptions.parse({**CREATE, "TABLE_TYPE": "MOR"})

    config = ensure_table(storage, options, SCHEMA.set(0, pa.field("id", pa.int64())))

    assert load_config(storage) == config
    assert (config.name, config.record_key, config.partition_by) == ("orders", "id", ("region",))
    assert (config.ordering_field, config.buckets, config.table_type) == ("ts", 2, "mor")
    assert not config.pa_schema.field("id").nullable


def test_the_publish_delta_option_creates_a_publishing_table_and_is_checked_after(
    storage: Storage,
) -> None:
    config = ensure_table(storage, TableOptions.parse({**CREATE, "publish.delta": "true"}), SCHEMA)
    assert config.publish.delta and config.publish.since_seq == -1
    with pytest.raises(TableOptionsMismatchError, match="publish.delta: given False"):
        ensure_table(storage, TableOptions.parse({"publish.delta": "false"}), SCHEMA)
    with pytest.raises(InvalidOptionError, match="'true' or 'false'"):
        TableOptions.parse({"publish.delta": "yes"})


def test_existing_table_refuses_disagreeing_options_naming_each(
    storage: Storage,
) -> None:
    ensure_table(storage, TableOptions.parse(CREATE), SCHEMA)

    given = {"record_key": "note", "partition_by": "", "buckets": "2", "table_type": "cow"}
    with pytest.raises(TableOptionsMismatchError) as caught:
        ensure_table(storage, TableOptions.parse(given), SCHEMA)

    assert caught.value.differences == (
        "record_key: given 'note', the table has 'id'",
        "partition_by: given [], the table has ['region']",
    )
    assert "nothing was written" in str(caught.value)
    # Options not given are not checked: a later write needs none.
    assert ensure_table(storage, TableOptions(), SCHEMA).record_key == "id"


def test_absent_table_without_record_key_and_bad_options_are_named(storage: Storage) -> None:
    with pytest.raises(NotATableError, match="record_key"):
        ensure_table(storage, TableOptions.parse({"partition_by": "region"}), SCHEMA)
    with pytest.raises(InvalidTableConfigError, match="'nope' is not a field"):
        ensure_table(storage, TableOptions(record_key="nope"), SCHEMA)
    with pytest.raises(InvalidOptionError, match="buckets"):
        TableOptions.parse({"buckets": "zero"})
    with pytest.raises(InvalidOptionError, match="table_type"):
        TableOptions.parse({"table_type": "delta"})
    with pytest.raises(NotATableError):
        load_config(storage)  # nothing was created
    assert default_table_name("s3://bucket/lake/orders/") == "orders"


def test_losing_the_creation_race_checks_against_the_winners_config(storage: Storage) -> None:
    winner = TableOptions(record_key="id", buckets=4)
    # The loser found no table, then the winner's config landed before its own.
    loser = TableOptions(record_key="id", buckets=2)
    config = winner.new_config(storage.uri, SCHEMA)

    class Racing(TableOptions):
        def new_config(self, uri: str, schema: pa.Schema) -> Any:
            from lakewarden.table.config import save_new_config

            save_new_config(storage, config)
            return super().new_config(uri, schema)

    racing = Racing(**loser.__dict__)
    with pytest.raises(TableOptionsMismatchError, match="buckets: given 2, the table has 4"):
        ensure_table(storage, racing, SCHEMA)


# -- as a user writes --------------------------------------------------------------------------


@pytest.mark.spark
def test_format_write_creates_the_table_then_refuses_disagreeing_options(
    spark: Any, table_dir: Path
) -> None:
    uri = str(table_dir)
    data = rows(range(40))
    spark_df(spark, data).write.format("lakewarden").options(**CREATE).mode("append").save(uri)

    table = Table.open(uri)
    assert (table.config.record_key, table.config.partition_by) == ("id", ("region",))
    assert table.config.buckets == 2 and table.name == "table"
    assert sorted_rows(lakewarden.read(uri)) == sorted_rows(data)

    wrong = spark_df(spark, rows(range(40, 45))).write.format("lakewarden")
    with pytest.raises(Exception, match="partition_by: given \\[\\], the table has"):
        wrong.option("partition_by", "").mode("append").save(uri)
    assert len(table.timeline()) == 1  # the refused write opened no instant


@pytest.mark.spark
def test_helper_write_creates_the_table(spark: Any, table_dir: Path) -> None:
    uri = str(table_dir)
    first = rows(range(30))
    # bulk_insert: the table is created before the operation matters, and it skips the
    # shuffle (the upserts of an existing table are test_spark_upsert's).
    result = lakewarden.spark.write(spark_df(spark, first), uri, "bulk_insert", options=CREATE)

    assert result.stats.operation == "bulk_insert"
    assert spark_rows(spark.read.format("lakewarden").load(uri)) == sorted_rows(first)
    # Refused on the driver, before Spark runs anything.
    with pytest.raises(TableOptionsMismatchError, match="ordering_field: given 'amount'"):
        lakewarden.spark.write(
            spark_df(spark, first), uri, "upsert", options={"ordering_field": "amount"}
        )
    assert len(Table.open(uri).timeline()) == 1


@pytest.mark.spark
@pytest.mark.slow
def test_stream_creates_the_table_on_first_batch(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "table")
    source = tmp_path / "source"
    source.mkdir()
    data = rows(range(25))
    pq.write_table(data.cast(SCHEMA), source / "part-0.parquet")
    query = (
        spark.readStream.schema("id long, region string, ts long, amount double, note string")
        .parquet(str(source))
        .writeStream.format("lakewarden")
        .options(**CREATE)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start(uri)
    )
    query.awaitTermination(120)
    assert query.exception() is None
    assert sorted_rows(lakewarden.read(uri)) == sorted_rows(data)
    assert Table.open(uri).config.ordering_field == "ts"


def test_make_table_still_works_with_explicit_create(table_dir: Path) -> None:
    # The explicit path stays: Table.create, then writes without table options.
    table = make_table(table_dir)
    assert ensure_table(table.storage, TableOptions(), SCHEMA) == table.config
