"""The data source's pieces without a SparkSession: options, schema checks and bad rows,
exactly-once micro-batches, abandoning an instant, and Python writes after a Spark append."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from _spark_helpers import committed_files, files_on_disk, make_table, rows, states
from pydantic import SecretStr
from pyspark.sql.types import LongType, StringType, StructField, StructType

import lakewarden
from lakewarden.errors import CommitStateUnknownError
from lakewarden.settings import CommitterSettings, KafkaSettings, S3Settings, Settings
from lakewarden.spark import _job
from lakewarden.spark._arrow import check_write_schema, conform
from lakewarden.spark._options import (
    InvalidOptionError,
    ReadSpec,
    committer_options,
    encode_settings,
    error_table_choice,
    load_settings,
    write_operation,
)
from lakewarden.spark._task import TaskIdentity, _close_all, write_task
from lakewarden.spark._transaction import (
    BatchAlreadyCommittedError,
    BatchKey,
    SparkTransaction,
    pending_of_checkpoint,
)
from lakewarden.table.bucket import bucket_prefix
from lakewarden.table.instant import Transition
from lakewarden.table.job_commit import AlreadyCommittedError, CommitRequest, commit_instant
from lakewarden.table.stats import CommitStats, WorkloadProfile
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


def test_the_settings_option_carries_no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """The option lands in Spark's plan (UI, event logs): the credentials stay out of it, and
    each process reads them from its own environment, else boto3's chain."""
    for name in ("LAKEWARDEN_S3__ACCESS_KEY_ID", "LAKEWARDEN_S3__SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    s3 = S3Settings(
        endpoint_url="http://x",
        access_key_id=SecretStr("AKIA-the-key-id"),
        secret_access_key=SecretStr("the-secret-value"),
    )
    encoded = encode_settings(Settings(s3=s3))
    assert "the-secret-value" not in encoded and "AKIA-the-key-id" not in encoded
    again = load_settings(encoded)
    assert again.s3.endpoint_url == "http://x"
    assert again.s3.access_key_id is None and again.s3.secret_access_key is None  # boto3's chain
    monkeypatch.setenv("LAKEWARDEN_S3__ACCESS_KEY_ID", "env-key")
    monkeypatch.setenv("LAKEWARDEN_S3__SECRET_ACCESS_KEY", "env-secret")
    from_env = load_settings(encoded)
    assert from_env.s3.endpoint_url == "http://x"
    assert from_env.s3.secret_access_key is not None
    assert from_env.s3.secret_access_key.get_secret_value() == "env-secret"


def test_settings_are_built_once_per_option_and_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A task asks for its settings several times: the same option in the same environment
    is one ``Settings``; a changed ``LAKEWARDEN_*`` variable (any case) is read again."""
    encoded = encode_settings(Settings(s3=S3Settings(endpoint_url="http://x")))
    first = load_settings(encoded)
    assert load_settings(encoded) is first
    assert load_settings(None) is load_settings(None)
    monkeypatch.setenv("lakewarden_state_dir", "/elsewhere")
    changed = load_settings(encoded)
    assert changed is not first and load_settings(None).state_dir == Path("/elsewhere")


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
        stats = CommitStats(operation="insert", batch=batch_key.micro_batch)
        commit_instant(None, txn, CommitRequest(instant, "job", (), stats))

    complete(first[0], key)
    with pytest.raises(
        AlreadyCommittedError, match=f"instant {first[0]} completed micro-batch"
    ) as no:
        complete(second[0], restarted)
    assert no.value.committed_by == first[0]
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
    rolled = table.timeline()[0]
    assert rolled.reason == "a task failed"
    assert (rolled.failed_stage, rolled.failed_job_id, rolled.error_type) == (
        "abort",
        spec.job_id,
        None,
    )
    assert files_on_disk(tmp_path) == set()


def test_python_upsert_after_a_spark_append_replaces_the_appended_records(
    tmp_path: Path,
) -> None:
    """Two tasks of a plain-format append hold rows of the same buckets (no shuffle), so each
    bucket gets two append groups; ``Table.write`` merges them with the canonical group."""
    table = make_table(tmp_path)
    handle = _job.TableHandle.open(str(tmp_path), None)
    spec, _ = _job.open_write(handle, "insert", settings_json=None)
    messages = [
        write_task(spec, TaskIdentity(task, 0, 1), iter(rows(ids).to_batches()))
        for task, ids in ((0, range(0, 12, 2)), (1, range(1, 12, 2)))
    ]
    _job.commit_write(spec, messages)
    appended = set(table.snapshot().slices)
    assert len(appended) > 2 and all(bucket_prefix(g.file_id) for g in appended)
    assert not any(g.file_id.endswith("-0000") for g in appended)  # no canonical group yet

    upsert = table.write(rows(range(6), ts=9, note="new"), operation="upsert")

    got = {r["id"]: r["note"] for r in table.read().to_pylist()}
    assert got == {i: "new" if i < 6 else "v1" for i in range(12)}  # no duplicate keys
    assert set(upsert.stats.replaced_file_groups) <= appended
    assert upsert.stats.replaced_file_groups  # the append groups of the upserted buckets

    delete = pa.table({"id": [7, 8], "region": ["eu", "eu"]})  # rows(): id % 3 -> "eu"
    table.write(delete, operation="delete")
    assert sorted(r["id"] for r in table.read().to_pylist()) == [0, 1, 2, 3, 4, 5, 6, 9, 10, 11]


class _RecordingClient:
    """A CommitClient stand-in: records the request and timeout it is given, answers nothing."""

    def __init__(self) -> None:
        self.timeouts: list[float] = []
        self.requests: list[CommitRequest] = []

    def commit(self, request: CommitRequest, *, timeout_s: float, manifests: object) -> None:
        self.timeouts.append(timeout_s)
        self.requests.append(request)
        raise CommitStateUnknownError("no answer (test)")


@pytest.mark.parametrize("job_commits", ["service", "embedded"])
def test_the_driver_takes_the_route_table_write_takes(tmp_path: Path, job_commits: str) -> None:
    """With Kafka configured, ``kafka.job_commits`` decides for the Spark driver as it does
    for ``Table.write``: embedded commits in the driver, service asks job-committer and waits
    ``kafka.job_commit_timeout_s`` (the setting, not a test option), sending the write's
    committer options over the driver's committer settings."""
    table = make_table(tmp_path)
    handle = _job.TableHandle.open(str(tmp_path), None)
    spec, _ = _job.open_write(handle, "insert", settings_json=None)
    message = write_task(spec, TaskIdentity(0, 0, 1), iter(rows(range(10)).to_batches()))
    kafka = KafkaSettings(
        bootstrap_servers="127.0.0.1:1", job_commits=job_commits, job_commit_timeout_s=7
    )
    settings = Settings(kafka=kafka, committer=CommitterSettings(threads=5, cleanup=False))
    spec = replace(
        spec,
        settings_json=settings.model_dump_json(),
        committer=CommitterSettings(threads=3, validate_output=True),
    )
    client = _RecordingClient()
    if job_commits == "embedded":
        _job.commit_write(spec, [message], table=handle, client=client)  # type: ignore[arg-type]
        assert states(table) == [Transition.COMPLETED] and client.timeouts == []
    else:
        with pytest.raises(CommitStateUnknownError):
            _job.commit_write(spec, [message], table=handle, client=client)  # type: ignore[arg-type]
        assert client.timeouts == [7]
        # The write's committer.* options win over the driver's settings, the rest carried.
        assert client.requests[0].committer == CommitterSettings(
            threads=3, validate_output=True, cleanup=False
        )


def test_committer_options_parse_case_insensitively_and_refuse_bad_values() -> None:
    assert committer_options({"path": "/t"}) is None
    parsed = committer_options(
        {
            "committer.Threads": "12",
            "COMMITTER.validate_output": "true",
            "committer.cleanup": "false",
        }
    )
    assert parsed == CommitterSettings(threads=12, validate_output=True, cleanup=False)
    with pytest.raises(InvalidOptionError, match=r"committer\.threads.*Help:"):
        committer_options({"committer.threads": "0"})
    with pytest.raises(InvalidOptionError, match=r"committer\.cleanp"):
        committer_options({"committer.cleanp": "false"})


def test_error_table_options_parse_into_a_choice() -> None:
    from lakewarden.table.config import ErrorTableChoice

    assert error_table_choice({}) is None
    assert error_table_choice({"error_table": "Local"}) == ErrorTableChoice(kind="local")
    chosen = error_table_choice(
        {"error_table": "global", "error_table.name": "all", "error_table.base_path": "/lake"}
    )
    assert chosen == ErrorTableChoice(kind="global", name="all", base_path="/lake")
    with pytest.raises(InvalidOptionError, match="need option error_table"):
        error_table_choice({"error_table.name": "all"})
    with pytest.raises(InvalidOptionError, match="no suffix.*Help:"):
        error_table_choice({"error_table": "global", "error_table.suffix": "_x"})
    with pytest.raises(InvalidOptionError, match="bad error_table options"):
        error_table_choice({"error_table": "elsewhere"})


def test_a_tasks_data_files_are_durable_before_its_task_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyarrow writes the attempt's local path and never syncs it: the task must, or a
    completed instant could name a file a machine crash empties."""
    table = make_table(tmp_path)
    handle = _job.TableHandle.open(str(tmp_path), None)
    spec, _ = _job.open_write(handle, "insert", settings_json=None)
    synced: set[int] = set()
    fsync = os.fsync

    def recorded(fd: int) -> None:
        synced.add(os.fstat(fd).st_ino)
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recorded)
    message = write_task(spec, TaskIdentity(0, 0, 1), iter(rows(range(10)).to_batches()))
    monkeypatch.setattr(os, "fsync", fsync)
    _job.commit_write(spec, [message])

    files = committed_files(table)
    assert files
    assert {os.stat(tmp_path / key).st_ino for key in files} <= synced


class _SlowFile:
    """Stands in for a task's open file: its close takes a while (an encode, an fsync)."""

    def __init__(self, size: int, delay_s: float, started: threading.Barrier | None = None):
        self.size, self.delay_s, self.started = size, delay_s, started
        self.closed = False

    def close(self) -> int:
        if self.started is not None:
            self.started.wait(timeout=10)  # every close is running at the same time
        time.sleep(self.delay_s)
        if self.size < 0:
            raise OSError("disk full")
        self.closed = True
        return self.size


def test_a_tasks_files_are_closed_side_by_side_in_order() -> None:
    together = threading.Barrier(3)
    files = [_SlowFile(size, 0.0, together) for size in (10, 20, 30)]
    closed = _close_all(files)  # type: ignore[arg-type]
    assert [(id(out), size) for out, size in closed] == [(id(f), f.size) for f in files]
    assert all(out.closed for out in files)


def test_a_failed_close_is_raised_after_every_other_close_ended() -> None:
    files = [_SlowFile(-1, 0.0), _SlowFile(20, 0.2), _SlowFile(30, 0.2)]
    with pytest.raises(OSError, match="disk full"):
        _close_all(files)  # type: ignore[arg-type]
    assert files[1].closed and files[2].closed
