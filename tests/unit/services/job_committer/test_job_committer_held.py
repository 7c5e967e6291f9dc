"""job-committer holds the manifests TaskManifest events carry and commits from them: no read
of a held manifest, storage for a pointer; the held store is bounded and forgets."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from _jc_unit import Job, connection, make_table, open_job, rows
from test_job_committer_handler import FakeTopic, _inline, commit_request, encoded

from lakewarden.commit import AnnouncedManifest, SavedManifest
from lakewarden.commit.manifest import parse_manifest
from lakewarden.events import decode, encode
from lakewarden.events.manifests import task_manifest_event
from lakewarden.settings import Settings
from lakewarden.storage import Storage
from lakewarden.testing import CallRecorder, ManualClock
from lakewarden_services._common.dlq import DeadLetters
from lakewarden_services._common.loop_service import Consumed
from lakewarden_services.job_committer import worker as worker_module
from lakewarden_services.job_committer.handler import ManifestHandler, RequestHandler
from lakewarden_services.job_committer.held import HeldManifests
from lakewarden_services.job_committer.worker import CommitWorker


class Service:
    """Both handlers of one job-committer, sharing its held manifests."""

    def __init__(self) -> None:
        self.held = HeldManifests()
        self.results: list[Any] = []
        letters = DeadLetters(FakeTopic(), service="job-committer", consumer_group="g")  # type: ignore[arg-type]
        self.requests = RequestHandler(
            worker=CommitWorker(Settings(), connection),
            run_blocking=_inline,
            send_result=self._result,
            send_transition=self._ignore,
            dead_letters=letters,
            producer_id="job-committer",
            held=self.held,
            manifest_wait_s=0.05,
        )
        self.manifests = ManifestHandler(
            settings=Settings(), run_blocking=_inline, dead_letters=letters, held=self.held
        )

    async def _result(self, table_id: str, event: Any) -> None:
        self.results.append(event.record)

    async def _ignore(self, table_id: str, event: Any) -> None:
        return None

    def feed(self, value: bytes, key: bytes, *, manifests: bool) -> None:
        message = Consumed("t", 0, 0, key, value, 0.0)
        handler = self.manifests if manifests else self.requests
        asyncio.run(handler.handle(message, decode(value)))


def _announcement(job: Job, attempt: str, *, inline: bool = True) -> bytes:
    key = job.committer.layout.manifest_key(job.committer.layout.check_attempt(attempt))
    data = job.table.storage.read(key)
    header, entries = parse_manifest(data, key=key)
    record = task_manifest_event(
        table_id=job.table.table_id,
        producer_id="spark-task",
        table_uri=job.table.uri,
        instant=job.instant,
        job_id=job.job_id,
        task_id=header.task_id,
        attempt_id=attempt,
        manifest_key=key,
        file_count=len(entries),
        total_bytes=sum(e.size for e in entries),
        saved=SavedManifest(header, tuple(entries), data),
        max_bytes=10**6 if inline else 0,
    )
    return encode("TaskManifest", record)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[CallRecorder]:
    """Every storage job-committer's worker opens, wrapped to record its calls."""
    opened: list[CallRecorder] = []
    real = worker_module.open_storage

    def recording(uri: str, settings: Settings | None = None) -> Storage:
        opened.append(CallRecorder(real(uri, settings)))
        return opened[-1]

    monkeypatch.setattr(worker_module, "open_storage", recording)
    return opened


def test_the_job_commit_reads_no_manifest_the_events_carried(
    tmp_path: Path, recorded: list[CallRecorder]
) -> None:
    job = open_job(make_table(str(tmp_path / "orders")), rows((1, "eu", "a")), rows((2, "us", "b")))
    service, key = Service(), job.table.table_id.encode()
    for attempt in job.accepted:
        service.feed(_announcement(job, attempt), key, manifests=True)
    assert service.held.size > 0
    service.feed(encoded(commit_request(job)), key, manifests=False)
    [result] = service.results
    assert result["status"] == "committed", result
    [storage] = recorded
    assert storage.keys("read", containing="/manifests/") == []
    assert service.held.size == 0  # the answered job's manifests are dropped


def test_a_pointer_only_manifest_is_read_and_the_job_commits(
    tmp_path: Path, recorded: list[CallRecorder]
) -> None:
    job = open_job(make_table(str(tmp_path / "orders")), rows((1, "eu", "a")), rows((2, "us", "b")))
    service, key = Service(), job.table.table_id.encode()
    inline, pointer = job.accepted
    service.feed(_announcement(job, inline), key, manifests=True)
    service.feed(_announcement(job, pointer, inline=False), key, manifests=True)
    service.feed(encoded(commit_request(job)), key, manifests=False)
    assert [r["status"] for r in service.results] == ["committed"]
    [storage] = recorded
    read = storage.keys("read", containing="/manifests/")
    assert [k.rpartition("/")[2] for k in read] == [f"{pointer}-manifest.json"]


def test_without_events_every_manifest_is_read(
    tmp_path: Path, recorded: list[CallRecorder]
) -> None:
    job = open_job(make_table(str(tmp_path / "orders")), rows((1, "eu", "a")), rows((2, "us", "b")))
    service = Service()
    service.feed(encoded(commit_request(job)), job.table.table_id.encode(), manifests=False)
    assert [r["status"] for r in service.results] == ["committed"]
    assert len(recorded[0].keys("read", containing="/manifests/")) == 2


def _manifest(attempt: str, size: int) -> AnnouncedManifest:
    return AnnouncedManifest(attempt, f"m/{attempt}", b"x" * size, "")


def test_the_held_manifests_are_bounded_by_bytes_and_age() -> None:
    clock = ManualClock()
    held = HeldManifests(max_bytes=100, max_age_s=60, clock=clock.monotonic)
    held.add("t", "old", "a0", _manifest("a0", 60))
    held.add("t", "new", "a1", _manifest("a1", 60))  # over 100: the oldest job goes
    assert held.take("t", "old", ["a0"]) == {} and held.size == 60
    assert held.known("t", "new", ["a1"])
    held.add("t", "big", "a2", _manifest("a2", 101))  # alone over the budget: a pointer
    assert held.known("t", "big", ["a2"]) and held.take("t", "big", ["a2"]) == {}
    clock.advance(61)
    held.add("t", "later", "a3", None)  # the jobs untouched for 60 s expire
    assert not held.known("t", "new", ["a1"]) and held.size == 0


def test_a_request_waits_briefly_for_announcements_not_read_yet() -> None:
    held = HeldManifests()
    announcing = threading.Timer(0.02, lambda: held.add("t", "j", "a1", None))
    announcing.start()  # the manifest lane, while the commit lane waits
    try:
        assert held.wait_for("t", "j", ["a1"], 60)  # woken by the announcement
    finally:
        announcing.join()
    assert not held.wait_for("t", "j", ["a1", "a2"], 0.01)
    assert held.wait_for("t", "empty-job", [], 60)  # nothing to wait for
