"""CommitClient: how results map to replies and errors, what a timeout reports (with a real
broker and no service: commit state unknown, the request sent exactly once), and
check_commit's reading of the timeline and the job summary."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakewarden.api.table import Table
from lakewarden.clients import (
    CommitClient,
    CommitRequest,
    CommitServiceUnavailableError,
    JobCommitFailedError,
    check_commit,
)
from lakewarden.clients.commit import reply_from_record, request_record
from lakewarden.commit import new_job_id
from lakewarden.errors import CommitStateUnknownError
from lakewarden.events import decode, ensure_topics
from lakewarden.events.topics import JOB_REQUESTS, JOB_RESULTS
from lakewarden.settings import Settings
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.stats import CommitStats, MicroBatch
from lakewarden.table.transaction import WriteTransaction

INSTANT = "20250314092654123"


def request(**changes: Any) -> CommitRequest:
    job_id = new_job_id()
    values: dict[str, Any] = {
        "table_uri": "/data/orders",
        "table_id": "orders-id",
        "instant": INSTANT,
        "job_id": job_id,
        "accepted": [f"attempt_{job_id}_000000_0"],
        "stats": CommitStats(operation="insert"),
    }
    values.update(changes)
    return CommitRequest(**values)


def result(req: CommitRequest, **fields: Any) -> dict[str, Any]:
    return {"instant": req.instant, "job_id": req.job_id, **fields}


def test_a_committed_result_is_the_reply() -> None:
    req = request()
    stats = CommitStats(operation="insert", job_id="job-1", input_records=3)
    reply = reply_from_record(
        req,
        result(
            req, status="committed", stats=stats.model_dump_json(), recorded=True, summary_key="s"
        ),
    )
    assert (reply.stats, reply.recorded, reply.summary_key) == (stats, True, "s")


def test_a_failed_result_raises_with_stage_type_and_reason() -> None:
    req = request()
    record = result(
        req,
        status="failed",
        reason="OverlappingCommitConflict: instant 1 touched region=eu",
        failed_stage="complete_instant",
        error_type="OverlappingCommitConflict",
    )
    with pytest.raises(JobCommitFailedError) as info:
        reply_from_record(req, record)
    err = info.value
    assert (err.stage, err.error_type, err.instant) == (
        "complete_instant",
        "OverlappingCommitConflict",
        INSTANT,
    )
    assert "at stage complete_instant: OverlappingCommitConflict" in str(err)


def test_a_result_the_service_could_not_settle_is_commit_state_unknown() -> None:
    req = request()
    record = result(req, status="failed", reason="lost", error_type="CommitStateUnknownError")
    with pytest.raises(CommitStateUnknownError, match="could not settle the outcome: lost"):
        reply_from_record(req, record)


def test_the_request_record_names_the_manifest_dir_and_carries_the_rules() -> None:
    batch = MicroBatch(query_id="q", run_id="r", batch_id=3)
    req = request(stats=CommitStats(operation="insert", batch=batch), lock_token=7)
    record = request_record(req, "me")
    assert record["manifest_dir"] == f"_temporary/manifest_{req.job_id}/00/manifests/"
    assert json.loads(record["metadata"]) == {"description": req.description}
    # The once rule's micro-batch travels in the statistics.
    assert CommitStats.model_validate_json(record["commit_stats"]) == req.stats
    assert req.stats.batch == batch
    assert record["envelope"]["table_id"] == "orders-id" and record["lock_token"] == 7


def isolated(settings: Settings) -> Settings:
    kafka = settings.kafka.model_copy(update={"topic_prefix": f"cc{uuid.uuid4().hex[:8]}."})
    return settings.model_copy(update={"kafka": kafka})


def test_no_answer_in_time_is_commit_state_unknown_and_nothing_is_resent(
    kafka_settings: Settings,
) -> None:
    settings = isolated(kafka_settings)
    ensure_topics(settings, specs=[JOB_REQUESTS, JOB_RESULTS])  # topics, but no service
    req = request()
    with CommitClient(settings) as client:
        started = time.monotonic()
        with pytest.raises(CommitStateUnknownError) as info:
            client.commit(req, timeout_s=2)
        elapsed = time.monotonic() - started
    # It waited the whole timeout (a lower bound holds on any machine); how promptly it gives
    # up after that is the loaded machine's speed, bounded only by the test's own timeout.
    assert elapsed >= 2
    message = str(info.value)
    assert info.value.instant == INSTANT and req.job_id in message
    assert "no answer from job-committer within 2 s" in message
    assert "check_commit(" in message and f".lakewarden/jobs/{req.job_id}/_SUCCESS" in message
    assert "do not start a new write" in message
    sent = _read_all(settings, JOB_REQUESTS.name(settings))
    assert [decode(v).record["job_id"] for v in sent] == [req.job_id]  # exactly once


def test_missing_topics_mean_the_service_is_unavailable_and_nothing_is_sent(
    kafka_settings: Settings,
) -> None:
    settings = isolated(kafka_settings)
    with CommitClient(settings) as client, pytest.raises(CommitServiceUnavailableError):
        client.commit(request(), timeout_s=2)
    assert _read_all(settings, JOB_REQUESTS.name(settings)) == []


def test_connect_listens_and_connects_ahead_and_sends_nothing(kafka_settings: Settings) -> None:
    """``connect`` starts what the first commit would (the results consumer at the topic's
    end, the producer): that commit keeps them, so its request is all it pays."""
    settings = isolated(kafka_settings)
    ensure_topics(settings, specs=[JOB_REQUESTS, JOB_RESULTS])
    with CommitClient(settings) as client:
        client.connect()
        consumer, producer = client._consumer, client._producer
        assert consumer is not None and consumer.assignment() and producer is not None
        with pytest.raises(CommitStateUnknownError):
            client.commit(request(), timeout_s=1)
        assert (client._consumer, client._producer) == (consumer, producer)
    assert len(_read_all(settings, JOB_REQUESTS.name(settings))) == 1  # the commit's only


def test_connect_without_the_topics_says_the_service_is_unavailable(
    kafka_settings: Settings,
) -> None:
    with CommitClient(isolated(kafka_settings)) as client:
        with pytest.raises(CommitServiceUnavailableError):
            client.connect()


def _read_all(settings: Settings, topic: str) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        settings.kafka.librdkafka_config(group_id=f"probe-{uuid.uuid4()}", enable_auto_commit=False)
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return []
        values = []
        for partition in metadata.partitions:
            tp = TopicPartition(topic, partition)
            _, high = consumer.get_watermark_offsets(tp, timeout=10)
            if high == 0:
                continue
            consumer.assign([TopicPartition(topic, partition, 0)])
            while len(values) < high:
                msg = consumer.poll(5)
                assert msg is not None
                values.append(msg.value() or b"")
        return values
    finally:
        consumer.close()


def test_check_commit_reads_the_timeline_and_the_job_summary(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64())])
    coordinator = EmbeddedCoordinator()
    table = Table.create(
        str(tmp_path / "t"), name="t", record_key="id", schema=schema, coordinator=coordinator
    )
    done = table.write(pa.table({"id": [1]}, schema=schema))
    [job_dir] = {o.key.split("/")[2] for o in table.storage.list(".lakewarden/jobs/")}
    state = check_commit(table.uri, done.instant, job_dir)
    assert (state.state, state.instant_state, state.job_summary) == (
        "committed",
        "completed",
        "COMMITTED",
    )
    txn = WriteTransaction.begin(
        table.timeline_log, coordinator, table.table_id, operation="insert", actor="t"
    )
    other_job = new_job_id()
    assert check_commit(table.uri, txn.instant, other_job).state == "pending"
    txn.rollback("given up", failed_stage="job_commit", job_id=other_job, error_type="Oops")
    rolled = check_commit(table.uri, txn.instant, other_job)
    assert (rolled.state, rolled.reason, rolled.job_summary) == ("rolled_back", "given up", None)
    assert (rolled.failed_stage, rolled.error_type) == ("job_commit", "Oops")
    assert check_commit(table.uri, INSTANT, other_job).state == "unknown_instant"
