"""The Spark driver's commit with Kafka configured goes through job-committer: the data
source's own task and driver code (``write_task``, ``commit_write``) without a SparkSession,
against the real broker, timeline-lock and job-committer; and so does ``Table.write`` (by
default with Kafka configured: ``kafka.job_commits == "service"``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from _jc_helpers import read_topic, wait_for

from lakewarden.api.connection import connect
from lakewarden.clients import JobCommitFailedError
from lakewarden.events.topics import TASK_MANIFESTS
from lakewarden.settings import Settings
from lakewarden.spark import _job
from lakewarden.spark._messages import TaskCommitMessage
from lakewarden.spark._options import WriteSpec, encode_settings
from lakewarden.spark._task import TaskIdentity, write_task
from lakewarden.spark._transaction import BatchAlreadyCommittedError, BatchKey
from lakewarden.table import Table, close_shared_connections
from lakewarden.table.instant import Transition
from lakewarden_services._common.process import ServiceProcess

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("committer_service")]

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("note", pa.string())])


def batches(ids: range, note: str = "v1") -> Iterator[pa.RecordBatch]:
    regions = ["eu" if i % 2 else "us" for i in ids]
    data = pa.table({"id": list(ids), "region": regions, "note": [note] * len(ids)}, SCHEMA)
    return iter(data.to_batches())


@pytest.fixture(scope="module", autouse=True)
def _close_shared_coordinators() -> Iterator[None]:
    """The driver code takes the process's shared connection (``shared_connection``); close
    it before the broker goes away at the end of the session."""
    yield
    close_shared_connections()


@pytest.fixture
def table(tmp_path: Path) -> Table:
    return Table.create(
        str(tmp_path / "t"), name="t", record_key="id", schema=SCHEMA, partition_by=["region"]
    )


def test_the_driver_commit_is_done_by_the_service(
    jc_settings: Settings, table: Table, committer_service: ServiceProcess
) -> None:
    encoded = encode_settings(jc_settings)
    handle = _job.TableHandle.open(table.uri, encoded)
    spec, _ = _job.open_write(handle, "insert", settings_json=encoded)
    messages = [
        write_task(spec, TaskIdentity(task, 0, 1), batches(ids))
        for task, ids in ((0, range(0, 10)), (1, range(10, 20)))
    ]
    loser = write_task(spec, TaskIdentity(1, 1, 1), batches(range(10, 20), note="zombie"))
    assert isinstance(loser, TaskCommitMessage)
    assert all(isinstance(m, TaskCommitMessage) and m.manifest_published for m in messages)
    # A task whose announcement failed (or a JVM task) leaves it to the driver.
    unannounced = replace(messages[1], manifest_published=False)

    result = _job.commit_write(spec, [messages[0], unannounced])

    reread = Table.open(table.uri)
    assert sorted(r["id"] for r in reread.read().to_pylist()) == list(range(20))
    assert {r["note"] for r in reread.read().to_pylist()} == {"v1"}
    [entry] = [e for e in reread.timeline_log.entries() if e.transition == "completed"]
    assert entry.actor.startswith("job-committer@")  # the service completed it, not the driver
    assert entry.instant == result.instant and result.stats.write_stats
    # Every committed attempt announced its own manifest, the zombie too (the audit trail has
    # all three; the job commit used only the accepted two); the driver announced the one
    # whose task left it to the driver.
    announced = [
        (r["task_attempt_id"], r["envelope"]["producer_id"], r["file_count"])
        for name, r in read_topic(jc_settings, TASK_MANIFESTS.name(jc_settings))
        if name == "TaskManifest" and r["job_id"] == spec.job_id
    ]
    attempts = [m.attempt_id for m in (*messages, loser) if isinstance(m, TaskCommitMessage)]
    by_tasks = {a: p for a, p, _ in announced if p.startswith("spark-task:")}
    assert sorted(by_tasks) == sorted(attempts) and len(announced) == 4
    assert all(producer == f"spark-task:{a}" for a, producer in by_tasks.items())
    assert [a for a, p, _ in announced if p.startswith("spark-writer@")] == [attempts[1]]
    assert all(count > 0 for _, _, count in announced)

    # The service checked each one early (a check that runs after the job's cleanup finds the
    # manifest gone: "missing"; the zombie's is deleted by the cleanup too).
    def manifests() -> dict[str, float]:
        _, text = committer_service.get("/metrics")
        found = re.findall(r'lakewarden_task_manifests_total\{status="(\w+)"\} ([\d.]+)', text)
        return {status: float(count) for status, count in found}

    assert wait_for(lambda: manifests().get("valid", 0) + manifests().get("missing", 0) == 4)
    assert manifests().get("invalid", 0) == manifests().get("mismatch", 0) == 0


def test_a_micro_batch_the_service_finds_committed_is_batch_already_committed(
    jc_settings: Settings, table: Table
) -> None:
    encoded = encode_settings(jc_settings)

    def run() -> tuple[WriteSpec, list[TaskCommitMessage]]:
        handle = _job.TableHandle.open(table.uri, encoded)
        spec, _ = _job.open_write(handle, "insert", settings_json=encoded)
        message = write_task(spec, TaskIdentity(0, 0, 1), batches(range(5)))
        return spec, [message]

    key = BatchKey("query-1", "run-1", 4, "/checkpoint")
    first, first_messages = run()
    _job.commit_write(first, first_messages, batch=key)
    again, again_messages = run()

    with pytest.raises(BatchAlreadyCommittedError) as info:
        _job.commit_write(again, again_messages, batch=BatchKey("query-1", "run-2", 4))

    assert info.value.committed_by == first.instant
    assert isinstance(info.value.__cause__, JobCommitFailedError)
    states = {s.instant: s.state for s in Table.open(table.uri).timeline()}
    assert states == {first.instant: Transition.COMPLETED, again.instant: Transition.ROLLED_BACK}
    assert len(Table.open(table.uri).read()) == 5


def test_table_write_goes_through_the_service_by_default(
    jc_settings: Settings, table: Table, committer_service: ServiceProcess
) -> None:
    """With Kafka configured and nothing else said, ``Table.write`` announces its attempt's
    manifest and job-committer runs the commit, as for Spark."""
    assert jc_settings.kafka.job_commits == "service"
    settings = jc_settings
    with connect(settings) as connection:
        writer = Table.open(table.uri, coordinator=connection.coordinator, settings=settings)
        result = writer.write(pa.table({"id": [1, 2], "region": ["eu", "us"], "note": ["a"] * 2}))
        [entry] = [
            e
            for e in writer.timeline_log.entries()
            if e.transition == "completed" and e.instant == result.instant
        ]
        assert entry.actor.startswith("job-committer@")
        assert sorted(r["id"] for r in Table.open(table.uri).read().to_pylist()) == [1, 2]
        announced = [
            r
            for name, r in read_topic(settings, TASK_MANIFESTS.name(settings))
            if name == "TaskManifest" and r["instant"] == result.instant
        ]
        assert len(announced) == 1 and announced[0]["file_count"] > 0
