"""The data source's pieces without a SparkSession: options, schema checks and bad rows, file
groups of a bucket, exactly-once micro-batches, and abandoning an instant."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from _spark_helpers import committed_files, files_on_disk, make_table, rows, states
from pyspark.sql.types import LongType, StringType, StructField, StructType

import lakewarden
from lakewarden.settings import S3Settings, Settings
from lakewarden.spark import _job
from lakewarden.spark._arrow import check_write_schema, conform
from lakewarden.spark._groups import BucketSlices, append_group, bucket_prefix
from lakewarden.spark._options import (
    InvalidOptionError,
    ReadSpec,
    encode_settings,
    load_settings,
    write_operation,
)
from lakewarden.spark._task import TaskIdentity, write_task
from lakewarden.spark._transaction import (
    BatchAlreadyCommittedError,
    BatchKey,
    SparkTransaction,
    pending_of_checkpoint,
)
from lakewarden.table.files import bucket_file_id
from lakewarden.table.instant import Transition
from lakewarden.table.snapshot import FileSlice, Snapshot
from lakewarden.table.stats import CommitStats, FileGroupId, WorkloadProfile, WriteStat
from lakewarden.table.writer import InvalidRecordError, SchemaMismatchError


def test_options() -> None:
    assert write_operation({"operation": "bulk_insert"}, False) == "bulk_insert"
    assert write_operation({}, True) == "insert_overwrite_table"
    with pytest.raises(InvalidOptionError, match="lakewarden.spark.write"):
        write_operation({"OPERATION": "upsert"}, False)
    with pytest.raises(InvalidOptionError, match="exclude each other"):
        ReadSpec.parse({"path": "/t", "as_of": "1", "since": "2"})
    assert ReadSpec.parse({"path": "/t", "columns": "a, b"}).columns == ("a", "b")
    with pytest.raises(InvalidOptionError, match="table URI"):
        ReadSpec.parse({})
    settings = Settings(s3=S3Settings(endpoint_url="http://x", access_key_id="k"))
    again = load_settings(encode_settings(settings))
    assert again.s3.access_key_id.get_secret_value() == "k"
    assert again.s3.endpoint_url == "http://x"


def test_schema_check_names_missing_extra_and_uncastable(tmp_path: Path) -> None:
    config = make_table(tmp_path).config
    spark_schema = StructType(
        [
            StructField("id", LongType()),
            StructField("region", StringType()),
            StructField("ts", StringType()),  # a string cast to int64 exists: allowed
            StructField("amount", StructType([StructField("x", LongType())])),
            StructField("extra", StringType()),
        ]
    )
    with pytest.raises(SchemaMismatchError) as info:
        check_write_schema(spark_schema, config, "insert")
    message = str(info.value)
    assert "missing columns ['note']" in message
    assert "columns not in the table ['extra']" in message
    assert "types that cannot be cast ['amount: struct<x: int64> (table: double)']" in message
    keys_only = StructType([StructField("id", LongType()), StructField("region", StringType())])
    check_write_schema(keys_only, config, "delete")


def test_conform_names_the_first_row_that_does_not_fit(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("small", pa.int8())])
    table = lakewarden.Table.create(str(tmp_path), name="t", record_key="id", schema=schema)
    batch = pa.table({"id": [1, 2, 3, 4], "small": [1, 2, 300, 400]})
    with pytest.raises(InvalidRecordError) as info:
        conform(batch, table.config, "insert", first_row=10, where="partition 3")
    assert info.value.record_index == 12 and info.value.record == {"id": 3, "small": 300}
    assert "partition 3, row 12" in str(info.value)
    nulls = pa.table({"id": pa.array([1, None], pa.int64()), "small": [1, 2]})
    with pytest.raises(InvalidRecordError, match="row 11 of the task's input.*null record key"):
        conform(nulls, table.config, "insert", first_row=10, where="partition 3")


def test_bucket_file_groups() -> None:
    canonical = FileGroupId(partition_path="r=1", file_id=bucket_file_id(3))
    appended = append_group(canonical, "20240101000000000", 7)
    assert appended.file_id == "00000003-20240101000000000-00007"
    assert bucket_prefix(appended.file_id) == bucket_prefix(canonical.file_id) == "00000003-"
    assert bucket_prefix("0c1e-uuid") is None

    def piece(group: FileGroupId) -> FileSlice:
        stat = WriteStat(file_group=group, path="p", base_instant="1", num_records=1, size_bytes=1)
        return FileSlice(group, "1", stat)

    other_bucket = FileGroupId(partition_path="r=1", file_id=bucket_file_id(4))
    other_partition = FileGroupId(partition_path="r=2", file_id=bucket_file_id(3))
    groups = [appended, other_bucket, canonical, other_partition]
    index = BucketSlices(Snapshot("1", {g: piece(g) for g in groups}))
    assert [s.file_group for s in index.of(canonical)] == [canonical, appended]


def test_one_instant_per_batch_and_one_completion_per_query_batch(tmp_path: Path) -> None:
    make_table(tmp_path)
    table = _job.TableHandle.open(str(tmp_path), None)
    key = BatchKey("query", "run-1", 4, "/checkpoint")

    def begin(batch_key: BatchKey, job: str) -> tuple[str, str]:
        return SparkTransaction.begin_batch(
            table.timeline, table.coordinator, table.config.table_id,
            key=batch_key, job_id=job, operation="insert", actor="test",
        )  # fmt: skip

    first = begin(key, "job-a")
    assert begin(key, "job-b") == first  # the second task finds the batch's instant
    restarted = BatchKey("query", "run-2", 4, "/checkpoint")
    second = begin(restarted, "job-c")  # a new run opens its own
    assert second[0] != first[0]
    assert {i for i, _ in pending_of_checkpoint(table.timeline.load(), "/checkpoint", 4)} == {
        first[0],
        second[0],
    }

    def complete(instant: str, batch_key: BatchKey) -> None:
        spec = _job.WriteSpec(str(tmp_path), instant, "job", "insert")
        txn = table.transaction(spec)
        txn.inflight(WorkloadProfile(operation="insert"))
        txn.complete_once(CommitStats(operation="insert", extra_metadata=batch_key.metadata()),
                          batch_key)  # fmt: skip

    complete(first[0], key)
    with pytest.raises(BatchAlreadyCommittedError, match=f"committed by instant {first[0]}"):
        complete(second[0], restarted)
    with pytest.raises(BatchAlreadyCommittedError):
        begin(BatchKey("query", "run-3", 4), "job-d")


def test_abandon_never_deletes_the_files_of_a_completed_instant(tmp_path: Path) -> None:
    """Spark calls abort() after a commit() that completed the instant and then failed."""
    table = make_table(tmp_path)
    handle = _job.TableHandle.open(str(tmp_path), None)
    spec, _ = _job.open_write(handle, "insert", settings_json=None)
    message = write_task(spec, TaskIdentity(0, 0, 1), iter(rows(range(10)).to_batches()))
    _job.commit_write(spec, [message])

    _job.abort_write(spec, "Spark aborted after a late failure")

    assert states(table) == [Transition.COMPLETED]
    assert files_on_disk(tmp_path) == committed_files(table) != set()
    assert lakewarden.read(str(tmp_path)).num_rows == 10


def test_abort_of_a_pending_write_rolls_back_then_deletes(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    handle = _job.TableHandle.open(str(tmp_path), None)
    spec, _ = _job.open_write(handle, "insert", settings_json=None)
    write_task(spec, TaskIdentity(0, 0, 1), iter(rows(range(10)).to_batches()))

    _job.abort_write(spec, "a task failed")

    assert states(table) == [Transition.ROLLED_BACK]
    assert table.timeline()[0].reason == "a task failed"
    assert files_on_disk(tmp_path) == set()


@pytest.mark.xfail(
    strict=True,
    reason="lakewarden.table.writer merges only a bucket's canonical file group; a Python "
    "upsert after a Spark append must also merge the bucket's append groups (proposed to the "
    "table owner: read BucketSlices.of(group) and replace the append groups)",
)
def test_python_upsert_after_a_spark_append_replaces_the_appended_records(
    tmp_path: Path,
) -> None:
    table = make_table(tmp_path)
    handle = _job.TableHandle.open(str(tmp_path), None)
    spec, _ = _job.open_write(handle, "insert", settings_json=None)
    message = write_task(spec, TaskIdentity(0, 0, 1), iter(rows(range(10)).to_batches()))
    _job.commit_write(spec, [message])

    table.write(rows(range(5), ts=9, note="new"), operation="upsert")

    assert table.read().num_rows == 10
