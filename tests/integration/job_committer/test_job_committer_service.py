"""job-committer end to end: real broker, real timeline-lock and job-committer processes,
tables on the local filesystem. A commit through the service, a duplicate request, a conflict
at completion, a manifest escaping the table, bad events in the DLQ."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

import pytest
from _jc_helpers import Driver, as_set, data_files, make_table, read_topic, rows, wait_for
from confluent_kafka import Producer

from lakewarden.api.table import Table
from lakewarden.clients import CommitClient, JobCommitFailedError, check_commit
from lakewarden.clients.commit import request_record
from lakewarden.events import make_event
from lakewarden.events.codec import default_codec
from lakewarden.events.topics import DLQ, JOB_REQUESTS, TASK_MANIFESTS, TIMELINE
from lakewarden.settings import Settings
from lakewarden.table.instant import Transition
from lakewarden_services._common.process import ServiceProcess

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("committer_service")]


def test_a_commit_through_the_service_places_the_accepted_attempts_and_completes(
    jc_settings: Settings, client: CommitClient, table_uri: str
) -> None:
    table = make_table(table_uri)
    driver = Driver.begin(table)
    # one file group per partition (one bucket): each task writes its own file groups
    first = driver.task(0, rows((1, "eu", "a"), (2, "us", "b")))
    winner = driver.task(1, rows((3, "apac", "c"), (4, "latam", "d")))
    loser = driver.task(1, rows((3, "apac", "zombie"), (4, "latam", "zombie")), attempt=1)
    request = driver.request([first, winner])

    reply = client.commit(request, timeout_s=60)

    assert not reply.recorded and reply.instant == driver.instant
    assert {s.path for s in reply.stats.write_stats} == {
        s.path for a in (first, winner) for s in driver.stats[a]
    }
    reread = Table.open(table_uri)
    assert as_set(reread.read()) == {
        (1, "eu", "a"),
        (2, "us", "b"),
        (3, "apac", "c"),
        (4, "latam", "d"),
    }
    [state] = reread.timeline()
    assert state.state is Transition.COMPLETED and state.commit == reply.stats
    # the loser's files never appear, and its private copies were cleaned up
    assert data_files(reread) == sorted(s.path for s in reply.stats.write_stats)
    assert loser.endswith("_1") and not [f for f in data_files(reread) if "_1-0-1_" in f]
    assert not list(reread.storage.list("_temporary/"))
    summary = driver.committer.summary()
    assert summary is not None and summary.state == "COMMITTED"
    assert set(summary.committed_files) == {first, winner}
    assert check_commit(table_uri, driver.instant, driver.job_id).state == "committed"
    # the entry the service appended is on the timeline topic, by the service's actor
    assert wait_for(lambda: _transitions(jc_settings, driver.instant) != [])
    [(name, record)] = _transitions(jc_settings, driver.instant)
    assert record["transition"] == "completed" and record["actor"].startswith("job-committer@")
    assert json.loads(record["payload"])["write_stats"][0]["path"] in data_files(reread)


def test_a_duplicate_request_is_answered_with_the_recorded_result(
    client: CommitClient, table_uri: str
) -> None:
    table = make_table(table_uri)
    driver = Driver.begin(table)
    request = driver.request([driver.task(0, rows((1, "eu", "a")))])
    first = client.commit(request, timeout_s=60)

    again = client.commit(request, timeout_s=60)

    assert again.recorded and again.stats == first.stats
    assert again.summary_key == f".lakewarden/jobs/{driver.job_id}/_SUCCESS"
    states = Table.open(table_uri).timeline()
    assert [(s.instant, s.state) for s in states] == [(driver.instant, Transition.COMPLETED)]
    assert as_set(Table.open(table_uri).read()) == {(1, "eu", "a")}


def test_a_conflict_at_completion_rolls_back_and_names_the_conflict(
    client: CommitClient, table_uri: str, committer_service: ServiceProcess
) -> None:
    table = make_table(table_uri, buckets=1)
    driver = Driver.begin(table)
    attempt = driver.task(0, rows((1, "eu", "late")))
    request = driver.request([attempt])
    winner = table.write(rows((1, "eu", "first"), (2, "eu", "first")), operation="upsert")

    with pytest.raises(JobCommitFailedError) as info:
        client.commit(request, timeout_s=60)

    err = info.value
    assert err.error_type == "OverlappingCommitConflict"
    assert err.stage == "complete_instant"
    assert winner.instant in err.reason and driver.instant in err.reason
    states = {s.instant: s for s in Table.open(table_uri).timeline()}
    assert states[driver.instant].state is Transition.ROLLED_BACK
    assert "OverlappingCommitConflict" in (states[driver.instant].reason or "")
    assert as_set(Table.open(table_uri).read()) == {(1, "eu", "first"), (2, "eu", "first")}
    assert [f for f in data_files(table) if driver.instant in f] == []  # renamed, then deleted
    summary = driver.committer.summary()
    assert summary is not None and summary.state == "ABORTED"
    # asked again: the recorded failure
    with pytest.raises(JobCommitFailedError) as again:
        client.commit(request, timeout_s=60)
    assert again.value.error_type == "OverlappingCommitConflict"
    assert again.value.stage == "complete_instant"
    _, metrics = committer_service.get("/metrics")
    assert (
        'lakewarden_job_commit_failures_total{error_type="OverlappingCommitConflict",'
        'stage="complete_instant"} 1.0' in metrics
    )


def test_a_manifest_escaping_the_table_is_refused_and_nothing_is_renamed(
    client: CommitClient, table_uri: str
) -> None:
    table = make_table(table_uri)
    driver = Driver.begin(table)
    good = driver.task(0, rows((1, "eu", "a")))

    def escape(manifest: bytes) -> bytes:
        doc = json.loads(manifest)
        doc["files"][0]["d"] = "../outside/stolen.parquet"
        return json.dumps(doc).encode()

    bad = driver.task(1, rows((2, "us", "b")), tamper=escape)
    request = driver.request([good, bad])

    with pytest.raises(JobCommitFailedError) as info:
        client.commit(request, timeout_s=60)

    assert info.value.error_type == "NonRetryableStageFailedError"
    assert info.value.stage is not None and info.value.stage.startswith("job_stage_")
    assert "outside" in info.value.reason
    assert data_files(table) == []  # nothing renamed, the private copies aborted
    assert not (Path(table_uri).parent / "outside").exists()
    [state] = Table.open(table_uri).timeline()
    assert state.state is Transition.ROLLED_BACK


def test_bad_events_go_to_the_dlq_and_the_service_keeps_serving(
    jc_settings: Settings,
    client: CommitClient,
    table_uri: str,
    committer_service: ServiceProcess,
) -> None:
    producer = Producer(jc_settings.kafka.librdkafka_config(logger=logging.getLogger("probe")))
    marker = uuid.uuid4().hex.encode()
    requests = JOB_REQUESTS.name(jc_settings)
    producer.produce(requests, b"\x00junk" + marker, key=b"bad-table")
    producer.produce(TASK_MANIFESTS.name(jc_settings), b"\xc3\x01" + b"\xff" * 8 + marker)
    table = make_table(table_uri)
    driver = Driver.begin(table)
    attempt = driver.task(0, rows((1, "eu", "a")))
    invalid = driver.request([attempt], table_uri="")  # no table URI: refused at once
    record = request_record(invalid, "probe")
    producer.produce(requests, default_codec().encode("JobCommitRequest", record), key=b"other")
    producer.flush(10)

    with pytest.raises(JobCommitFailedError) as info:
        client.commit(invalid, timeout_s=60)
    assert info.value.stage == "check_request" and "table_uri is empty" in info.value.reason
    reply = client.commit(driver.request([attempt]), timeout_s=60)  # still serving
    assert as_set(Table.open(table_uri).read()) == {(1, "eu", "a")} and not reply.recorded

    def reasons() -> set[str]:
        letters = [r for _, r in read_topic(jc_settings, DLQ.name(jc_settings))]
        ours = (marker, driver.job_id.encode())
        return {r["reason"] for r in letters if any(m in r["value"] for m in ours)}

    assert wait_for(
        lambda: {"bad_magic", "unknown_fingerprint", "key_mismatch", "invalid_request"} <= reasons()
    ), reasons()
    _, metrics = committer_service.get("/metrics")
    assert 'lakewarden_dead_letters_total{reason="bad_magic",service="job-committer"}' in metrics
    assert committer_service.get("/health")[0] == 200


def test_task_manifest_events_are_checked_early(
    jc_settings: Settings, table_uri: str, committer_service: ServiceProcess
) -> None:
    table = make_table(table_uri)
    driver = Driver.begin(table)
    attempt = driver.task(0, rows((1, "eu", "a"), (2, "us", "b")))
    key = driver.committer.layout.manifest_key(driver.committer.layout.attempt_id(0))
    total = sum(s.size_bytes for s in driver.stats[attempt])
    producer = Producer(jc_settings.kafka.librdkafka_config(logger=logging.getLogger("probe")))
    for count in (2, 5):  # the second one lies about its file count
        record = make_event(
            "TaskManifest",
            table_id=table.table_id,
            producer_id="probe",
            job_id=driver.job_id,
            task_id=f"task_{driver.job_id}_000000",
            task_attempt_id=attempt,
            instant=driver.instant,
            manifest_path=key,
            file_count=count,
            total_bytes=total,
            table_uri=table_uri,
        )
        value = default_codec().encode("TaskManifest", record)
        producer.produce(TASK_MANIFESTS.name(jc_settings), value, key=table.table_id.encode())
    producer.flush(10)

    def counted() -> str:
        return committer_service.get("/metrics")[1]

    assert wait_for(lambda: 'lakewarden_task_manifests_total{status="mismatch"} 1.0' in counted())
    assert 'lakewarden_task_manifests_total{status="valid"} 1.0' in counted()


def _transitions(settings: Settings, instant: str) -> list[tuple[str, dict[str, object]]]:
    return [
        (name, record)
        for name, record in read_topic(settings, TIMELINE.name(settings))
        if record.get("instant") == instant
    ]
