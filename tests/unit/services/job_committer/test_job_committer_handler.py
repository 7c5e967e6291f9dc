"""job-committer's request parsing and handlers, driven without Kafka: dead letters
for every kind of bad event, refusals for invalid requests, results and transitions."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _jc_unit import Job, connection, delta_versions, make_table, open_job, rows

from lakewarden.clients import CommitRequest
from lakewarden.clients.commit import request_record
from lakewarden.events import (
    Event,
    EventDecodeError,
    InvalidEvent,
    Undecodable,
    decode,
    encode,
    make_event,
)
from lakewarden.settings import CommitterSettings, Settings
from lakewarden.table.read_manifest import PREFIX as READ_MANIFESTS
from lakewarden.table.stats import MicroBatch
from lakewarden.testing import Fault, SimulatedCrash, fault_plan
from lakewarden_services._common.dlq import DeadLetters
from lakewarden_services._common.loop_service import Consumed
from lakewarden_services.job_committer.handler import (
    PUBLISH_DELTA_POINT,
    ManifestHandler,
    RequestHandler,
)
from lakewarden_services.job_committer.protocol import parse_request
from lakewarden_services.job_committer.worker import CommitWorker

TOPIC = "lakewarden.job.requests"


class FakeTopic:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes | None, Event]] = []

    async def send(self, *, key: bytes | None, value: Event) -> None:
        self.sent.append((key, value))


async def _inline(func: Callable[[], Any]) -> Any:
    return func()


class Harness:
    def __init__(self) -> None:
        self.dlq = FakeTopic()
        self.results: list[tuple[str, Event]] = []
        self.transitions: list[tuple[str, Event]] = []
        letters = DeadLetters(self.dlq, service="job-committer", consumer_group="g")  # type: ignore[arg-type]
        self.requests = RequestHandler(
            worker=CommitWorker(Settings(), connection),
            run_blocking=_inline,
            send_result=self._result,
            send_transition=self._transition,
            dead_letters=letters,
            producer_id="job-committer",
        )
        self.manifests = ManifestHandler(
            settings=Settings(), run_blocking=_inline, dead_letters=letters
        )
        self.offset = 0

    async def _result(self, table_id: str, event: Event) -> None:
        self.results.append((table_id, event))

    async def _transition(self, table_id: str, event: Event) -> None:
        self.transitions.append((table_id, event))

    def feed(self, value: bytes, *, key: bytes | None, manifests: bool = False) -> None:
        message = Consumed(TOPIC, 0, self.offset, key, value, 0.0)
        self.offset += 1
        try:
            decoded: Any = decode(value)
        except EventDecodeError as err:
            decoded = Undecodable(err, value)
        handler = self.manifests if manifests else self.requests
        asyncio.run(handler.handle(message, decoded))

    def reasons(self) -> list[str]:
        return [event.record["reason"] for _, event in self.dlq.sent]


def commit_request(job: Job, **changes: Any) -> CommitRequest:
    values: dict[str, Any] = {
        "table_uri": job.table.uri,
        "table_id": job.table.table_id,
        "instant": job.instant,
        "job_id": job.job_id,
        "accepted": job.accepted,
        "stats": job.stats,
    }
    values.update(changes)
    return CommitRequest(**values)


def encoded(request: CommitRequest) -> bytes:
    return encode("JobCommitRequest", request_record(request, "test"))


@pytest.fixture
def job(tmp_path: Path) -> Job:
    return open_job(make_table(str(tmp_path / "orders")), rows((1, "eu", "a")))


def test_a_request_is_committed_and_answered_with_its_transition(job: Job) -> None:
    h = Harness()
    h.feed(encoded(commit_request(job)), key=job.table.table_id.encode())
    [(table_id, result)] = h.results
    assert table_id == job.table.table_id and result.name == "JobCommitResult"
    assert result.record["status"] == "committed" and result.record["recorded"] is False
    assert json.loads(result.record["stats"]) == job.stats.model_dump(mode="json")
    [(_, transition)] = h.transitions
    assert transition.record["transition"] == "completed"
    assert transition.record["instant"] == job.instant
    assert h.dlq.sent == []
    h.feed(encoded(commit_request(job)), key=job.table.table_id.encode())
    assert h.results[-1][1].record["recorded"] is True


# -- the Delta version, published after the answer ---------------------------------------------


@pytest.fixture
def published(tmp_path: Path) -> Job:
    """A pending job of a table that publishes a Delta log (version 0: the create's)."""
    table = make_table(str(tmp_path / "orders"), publish_delta=True)
    return open_job(table, rows((1, "eu", "a")))


def _read_manifest_of(job: Job) -> bool:
    keys = [o.key for o in job.table.storage.list(READ_MANIFESTS)]
    return any(key.endswith(f"_{job.instant}.json") for key in keys)


def _record_sends(h: Harness, job: Job, root: Path) -> list[tuple[str, list[int], bool]]:
    """What stood in storage as each event was sent: (event, Delta versions, whether the read
    manifest of the job's instant was written)."""
    seen: list[tuple[str, list[int], bool]] = []

    def recording(send: Callable[[str, Event], Any]) -> Callable[[str, Event], Any]:
        async def send_and_record(table_id: str, event: Event) -> None:
            seen.append((event.name, delta_versions(root), _read_manifest_of(job)))
            await send(table_id, event)

        return send_and_record

    h.requests.send_result = recording(h.requests.send_result)
    h.requests.send_transition = recording(h.requests.send_transition)
    return seen


def test_the_answer_is_sent_before_the_delta_version_and_after_the_read_manifest(
    published: Job, tmp_path: Path
) -> None:
    h = Harness()
    seen = _record_sends(h, published, tmp_path / "orders")
    h.feed(encoded(commit_request(published)), key=published.table.table_id.encode())
    assert [r.record["status"] for _, r in h.results] == ["committed"]
    # Answered with only the create's version published; the read manifest was written first.
    assert seen == [("TimelineTransition", [0], True), ("JobCommitResult", [0], True)]
    assert delta_versions(tmp_path / "orders") == [0, 1]


def test_with_publish_on_commit_off_job_committer_publishes_nothing(
    published: Job, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKEWARDEN_PUBLISH_ON_COMMIT", "false")
    h = Harness()
    key = published.table.table_id.encode()
    h.feed(encoded(commit_request(published)), key=key)
    h.feed(encoded(commit_request(published)), key=key)  # a duplicate: the recorded answer
    assert [r.record["recorded"] for _, r in h.results] == [False, True]
    assert delta_versions(tmp_path / "orders") == [0]
    assert _read_manifest_of(published)  # the read manifest is not publishing: still written


@pytest.mark.parametrize("then", ["redelivered", "next_commit"])
def test_a_crash_after_the_answer_leaves_no_version_missing_for_long(
    published: Job, tmp_path: Path, then: str
) -> None:
    """Killed between the answer and the Delta version: the redelivered request (its offset
    was not committed) or the next commit of the table publishes every missing version."""
    h = Harness()
    key = published.table.table_id.encode()
    root = tmp_path / "orders"
    with fault_plan(Fault(point=PUBLISH_DELTA_POINT, action="crash")):
        with pytest.raises(SimulatedCrash):
            h.feed(encoded(commit_request(published)), key=key)
    [(_, result)] = h.results
    assert result.record["status"] == "committed" and delta_versions(root) == [0]
    if then == "redelivered":
        h.feed(encoded(commit_request(published)), key=key)
        assert h.results[-1][1].record["recorded"] is True
        assert delta_versions(root) == [0, 1]
    else:
        second = open_job(published.table, rows((2, "us", "b")))
        h.feed(encoded(commit_request(second)), key=key)
        assert delta_versions(root) == [0, 1, 2]


def test_undecodable_and_misfit_events_are_dead_lettered(job: Job) -> None:
    h = Harness()
    h.feed(b"\x00junk-and-more-bytes", key=b"t")
    h.feed(b"\xc3\x01" + b"\xff" * 8 + b"body", key=b"t")
    h.feed(encoded(commit_request(job)), key=b"another-table")
    heartbeat = make_event(
        "TaskManifest",
        table_id=job.table.table_id,
        producer_id="t",
        job_id=job.job_id,
        task_id=f"task_{job.job_id}_000000",
        task_attempt_id=job.accepted[0],
        instant=job.instant,
        manifest_path="x",
        file_count=1,
        total_bytes=1,
    )
    h.feed(encode("TaskManifest", heartbeat), key=job.table.table_id.encode())
    assert h.reasons() == ["bad_magic", "unknown_fingerprint", "key_mismatch", "unexpected_event"]
    assert h.results == [] and h.transitions == []


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"table_uri": ""}, "table_uri is empty"),
        ({"accepted": ("attempt_otherjob_000000_0",)}, "belongs to job otherjob"),
        ({"accepted": ("not-an-attempt",)}, "invalid task attempt id"),
    ],
)
def test_an_invalid_request_is_dead_lettered_and_refused_at_once(
    job: Job, change: dict[str, Any], detail: str
) -> None:
    h = Harness()
    h.feed(encoded(commit_request(job, **change)), key=job.table.table_id.encode())
    assert h.reasons() == ["invalid_request"]
    [(_, refusal)] = h.results
    assert refusal.record["status"] == "failed"
    assert refusal.record["failed_stage"] == "check_request"
    assert detail in refusal.record["reason"]


def test_parse_request_checks_the_manifest_dir_and_the_statistics(job: Job) -> None:
    record = request_record(commit_request(job), "test")
    key = job.table.table_id.encode()
    assert parse_request("JobCommitRequest", record, key=key).accepted == job.accepted
    for field, value, detail in [
        ("manifest_dir", "_temporary/elsewhere/", "manifest_dir"),
        ("commit_stats", '{"write_stats": 3}', "commit_stats"),
        ("metadata", '{"once": {"k": 1}}', "metadata.once"),
    ]:
        with pytest.raises(InvalidEvent, match=detail) as info:
            parse_request("JobCommitRequest", {**record, field: value}, key=key)
        assert info.value.reason == "invalid_request"


def test_a_request_from_a_client_before_the_typed_payload_keeps_its_once_rule(job: Job) -> None:
    """An older client sends version-1 ``commit_stats`` (the batch in ``extra_metadata``)
    and ``metadata.once``: the request reads as the typed micro-batch, the rule's key."""
    record = request_record(commit_request(job), "old-client")
    old_stats = json.loads(record["commit_stats"])
    del old_stats["version"]
    old_stats["extra_metadata"] = {
        "spark.job_id": job.job_id,
        "spark.streaming.query_id": "q",
        "spark.streaming.run_id": "r",
        "spark.streaming.batch_id": "4",
        "spark.streaming.checkpoint": "",
    }
    once = {"spark.streaming.query_id": "q", "spark.streaming.batch_id": "4"}
    old = {
        **record,
        "commit_stats": json.dumps(old_stats),
        "metadata": json.dumps({"once": once, "description": "d"}),
    }
    parsed = parse_request("JobCommitRequest", old, key=job.table.table_id.encode())
    assert parsed.stats.batch == MicroBatch(query_id="q", run_id="r", batch_id=4)
    assert parsed.stats.job_id == job.job_id
    assert parsed.stats.write_stats == job.stats.write_stats


def test_task_manifests_are_validated_early(job: Job) -> None:
    h = Harness()
    layout = job.committer.layout
    path = layout.manifest_key(layout.attempt_id(0))
    size = job.stats.write_stats[0].size_bytes

    def notice(**changes: Any) -> bytes:
        fields: dict[str, Any] = {
            "job_id": job.job_id,
            "task_id": f"task_{job.job_id}_000000",
            "task_attempt_id": job.accepted[0],
            "instant": job.instant,
            "manifest_path": path,
            "file_count": 1,
            "total_bytes": size,
            "table_uri": job.table.uri,
        }
        fields.update(changes)
        record = make_event("TaskManifest", table_id=job.table.table_id, producer_id="t", **fields)
        return encode("TaskManifest", record)

    from lakewarden_services.job_committer import metrics

    def count(status: str) -> float:
        return metrics.MANIFESTS.labels(status)._value.get()  # type: ignore[no-any-return]

    before = {s: count(s) for s in ("valid", "mismatch", "missing", "invalid", "audit_only")}
    key = job.table.table_id.encode()
    h.feed(notice(), key=key, manifests=True)
    h.feed(notice(total_bytes=size + 1), key=key, manifests=True)
    h.feed(notice(manifest_path=path.replace("_000000_0", "_000009_0")), key=key, manifests=True)
    h.feed(notice(table_uri=""), key=key, manifests=True)
    h.feed(notice(task_id=f"task_{job.job_id}_000004"), key=key, manifests=True)
    after = {s: count(s) - before[s] for s in before}
    assert after == {"valid": 1, "mismatch": 1, "missing": 0, "invalid": 1, "audit_only": 1}
    assert h.reasons() == ["invalid_request"]  # the attempt is not one of that task


def _job_dir_kept(job: Job) -> bool:
    return any(o.key.startswith("_temporary/") for o in job.table.storage.list("_temporary/"))


def _summary(job: Job) -> dict[str, Any]:
    data = job.table.storage.read(f".lakewarden/jobs/{job.job_id}/_SUCCESS")
    return json.loads(data)  # type: ignore[no-any-return]


def test_the_request_carries_the_writers_committer_options(job: Job) -> None:
    h = Harness()
    options = CommitterSettings(validate_output=True, cleanup=False)
    h.feed(encoded(commit_request(job, committer=options)), key=job.table.table_id.encode())
    [(_, result)] = h.results
    assert result.record["status"] == "committed", result.record
    assert _job_dir_kept(job)  # cleanup off: the manifests stay for diagnosis
    assert _summary(job)["diagnostics"]["validated_files"] == "1"


def test_the_services_settings_apply_and_the_request_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKEWARDEN_COMMITTER__CLEANUP", "false")
    h = Harness()
    kept = open_job(make_table(str(tmp_path / "kept")), rows((1, "eu", "a")))
    h.feed(encoded(commit_request(kept)), key=kept.table.table_id.encode())
    cleaned = open_job(make_table(str(tmp_path / "cleaned")), rows((1, "eu", "a")))
    asked = commit_request(cleaned, committer=CommitterSettings(cleanup=True))
    h.feed(encoded(asked), key=cleaned.table.table_id.encode())
    assert [r.record["status"] for _, r in h.results] == ["committed", "committed"]
    assert _job_dir_kept(kept) and not _job_dir_kept(cleaned)


def test_bad_committer_options_are_dead_lettered(job: Job) -> None:
    h = Harness()
    record = request_record(commit_request(job), "test")
    record["committer_options"] = {"threads": 0, "validate_output": None, "cleanup": None}
    h.feed(encode("JobCommitRequest", record), key=job.table.table_id.encode())
    assert h.reasons() == ["invalid_request"]
    assert "threads" in h.dlq.sent[0][1].record["detail"]


def test_a_request_never_carries_report_directories(job: Job) -> None:
    """A request must not make the service write where it names: the report directories
    stay with the writer's own commits; job-committer uses its own settings."""
    reports = CommitterSettings(summary_report_directory="/anywhere")
    assert request_record(commit_request(job, committer=reports), "t")["committer_options"] is None
    both = CommitterSettings(cleanup=False, diagnostics_manifest_directory="/anywhere")
    carried = request_record(commit_request(job, committer=both), "t")["committer_options"]
    assert carried == {"threads": None, "validate_output": None, "cleanup": False}
