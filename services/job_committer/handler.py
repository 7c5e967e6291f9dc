"""What job-committer does with one event, apart from Kafka (so tests drive it directly).

``RequestHandler.handle`` takes one message of ``job.requests``:

1. undecodable, not a JobCommitRequest, keyed wrongly or invalid: dead-letter it; an invalid
   request that names its instant and job is also answered ``failed`` (stage
   ``check_request``), so its sender does not wait for a timeout;
2. take the accepted attempts' manifests held from their ``TaskManifest`` events
   (``HeldManifests``), waiting up to ``manifest_wait_s`` for events sent before the request
   but not read yet;
3. run the job commit (``CommitWorker.run``, on the commit lane's thread: the loop's consumer
   goes on): it loads the held manifests and reads storage for the others;
4. publish the ``TimelineTransition`` of the entry the service appended, then the
   ``JobCommitResult``, and drop the job's held manifests;
5. then, on the same lane, publish the table's Delta version (``CommitWorker.publish``, best
   effort). The writer (a streaming ingestion waits once per micro-batch) does not wait for
   it: publishing never decided a commit's outcome, and nothing promised the version before
   the answer (the publisher service publishes from the timeline topic on its own time).

Delivery is at-least-once and every step is idempotent: a request redelivered after a crash
resumes the job commit where it stopped, and a duplicate request for a finished job is
answered with the recorded result. The offset of a request is committed only after its
answer was produced and the producer flushed (``loop``), and after step 5: a crash between the
answer and the Delta version redelivers the request, whose recorded answer publishes it (as
do the next commit's step 5, the publisher service, or ``lakewarden publish sync``, each of
which writes every missing version in order).

The handlers are coroutines in which nothing suspends (``_common.loop_service``): the loop
steps each to its end on its lane's thread, and unit tests run them with ``asyncio.run``.

``ManifestHandler.handle`` takes one ``TaskManifest``: the audit trail (a log line and a
counter per event), early validation of the manifest (the event's copy, or the saved one
when the event is a pointer and names its table), and holds the manifest for the job commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import lakewarden.faults as faults
from lakewarden.clients.timeline_events import transition_record
from lakewarden.commit import AnnouncedManifest, CommitError
from lakewarden.events import Event, InvalidEvent, Undecodable
from lakewarden.events.manifests import announced_manifest
from lakewarden.settings import Settings
from lakewarden.storage import open_storage
from lakewarden.table.job_commit import CommitRequest
from lakewarden_services._common.dlq import DeadLetterSink, Message, dead_letter_failures
from lakewarden_services.job_committer import metrics
from lakewarden_services.job_committer.held import HeldManifests
from lakewarden_services.job_committer.protocol import (
    ManifestNotice,
    Outcome,
    parse_manifest_event,
    parse_request,
    refusal_for,
    result_record,
)
from lakewarden_services.job_committer.worker import (
    CommitWorker,
    check_announced,
    check_manifest,
)

log = logging.getLogger(__name__)

RunBlocking = Callable[[Callable[[], Any]], Awaitable[Any]]
SendEvent = Callable[[str, Event], Awaitable[None]]
# A test's fault plan (``lakewarden.faults``) may crash the service here: the commit is done,
# its answer not sent.
PUBLISH_POINT = "job_committer.publish_result"
# ... or here: the answer sent, the Delta version not published.
PUBLISH_DELTA_POINT = "job_committer.publish_delta"


class RequestHandler:
    """Answers job commit requests."""

    def __init__(
        self,
        *,
        worker: CommitWorker,
        run_blocking: RunBlocking,
        send_result: SendEvent,
        send_transition: SendEvent,
        dead_letters: DeadLetterSink,
        producer_id: str,
        held: HeldManifests | None = None,
        manifest_wait_s: float = 0.0,
    ) -> None:
        self.worker = worker
        self.run_blocking = run_blocking
        self.send_result = send_result
        self.send_transition = send_transition
        self.dead_letters = dead_letters
        self.producer_id = producer_id
        self.held = held if held is not None else HeldManifests(max_bytes=0)
        self.manifest_wait_s = manifest_wait_s

    async def handle(self, message: Message, value: Any) -> None:
        """Process one message of ``job.requests`` (see the module docstring). A failure of
        the service itself dead-letters the request (``handler_error``): one bad request must
        not stop the commits of every table."""
        await dead_letter_failures(
            self.dead_letters, message, self._handle(message, value), what="job commit request"
        )

    async def _handle(self, message: Message, value: Any) -> None:
        if isinstance(value, Undecodable):
            await self.dead_letters.undecodable(message, value)  # 1.
            return
        name, record = value
        try:
            job = parse_request(name, record, key=message.key)
        except InvalidEvent as err:
            await self.dead_letters.reject(message, reason=err.reason, detail=err.detail)
            refusal = refusal_for(record, err) if isinstance(record, dict) else None
            if refusal is not None:
                table_id = str(refusal["envelope"]["table_id"])
                await self.send_result(table_id, Event("JobCommitResult", refusal))
            return
        started = time.monotonic()
        log.info(
            "job commit requested",
            extra={"table": job.table_id, "instant": job.instant, "job_id": job.job_id},
        )
        accepted = [str(a) for a in job.accepted]
        await self.run_blocking(  # 2.
            lambda: self.held.wait_for(job.table_id, job.job_id, accepted, self.manifest_wait_s)
        )
        announced = self.held.take(job.table_id, job.job_id, accepted)
        outcome: Outcome = await self.run_blocking(lambda: self.worker.run(job, announced))  # 3.
        await self._answer(job, outcome)  # 4.
        self.held.forget(job.table_id, job.job_id)
        _count(outcome, time.monotonic() - started)
        _log(job, outcome)
        await self._point(PUBLISH_DELTA_POINT)
        await self.run_blocking(lambda: self.worker.publish(outcome))  # 5.

    async def _answer(self, job: CommitRequest, outcome: Outcome) -> None:
        await self._point(PUBLISH_POINT)
        for entry in outcome.entries:
            record = transition_record(entry, table_id=job.table_id, producer_id=self.producer_id)
            await self.send_transition(job.table_id, Event("TimelineTransition", record))
            metrics.TRANSITIONS.labels(str(entry.transition)).inc()
        record = result_record(job, outcome, producer_id=self.producer_id)
        await self.send_result(job.table_id, Event("JobCommitResult", record))

    async def _point(self, name: str) -> None:
        if faults.planned(name):  # a test's plan (a pause, a kill)
            await self.run_blocking(lambda: faults.point(name))


def _count(outcome: Outcome, elapsed_s: float) -> None:
    metrics.COMMITS.labels(outcome.status, str(outcome.recorded).lower()).inc()
    metrics.DURATION.observe(elapsed_s)
    metrics.FILES.inc(outcome.placed)
    metrics.LOADED.labels("event").inc(outcome.manifests_from_events)
    metrics.LOADED.labels("storage").inc(outcome.manifests_from_storage)
    if outcome.resumed:
        metrics.RESUMED.inc()
    if not outcome.committed and not outcome.recorded:
        stage, error = outcome.failed_stage or "unknown", outcome.error_type or "unknown"
        metrics.FAILURES.labels(stage, error).inc()


def _log(job: CommitRequest, outcome: Outcome) -> None:
    extra = {
        "table": job.table_id,
        "instant": job.instant,
        "job_id": job.job_id,
        "status": outcome.status,
        "recorded": outcome.recorded,
    }
    if outcome.committed:
        log.info("job committed (%d files placed)", outcome.placed, extra=extra)
    else:
        extra["stage"] = outcome.failed_stage
        log.warning("job commit failed: %s", outcome.reason, extra=extra)


class ManifestHandler:
    """Keeps the audit trail of task manifests and validates them early."""

    def __init__(
        self,
        *,
        settings: Settings,
        run_blocking: RunBlocking,
        dead_letters: DeadLetterSink,
        held: HeldManifests | None = None,
    ) -> None:
        self.settings = settings
        self.run_blocking = run_blocking
        self.dead_letters = dead_letters
        self.held = held if held is not None else HeldManifests(max_bytes=0)

    async def handle(self, message: Message, value: Any) -> None:
        """Process one message of ``task.manifests``; bad events are dead-lettered."""
        await dead_letter_failures(
            self.dead_letters, message, self._handle(message, value), what="task manifest event"
        )

    async def _handle(self, message: Message, value: Any) -> None:
        if isinstance(value, Undecodable):
            await self.dead_letters.undecodable(message, value)
            return
        name, record = value
        try:
            notice = parse_manifest_event(name, record, key=message.key)
        except InvalidEvent as err:
            await self.dead_letters.reject(message, reason=err.reason, detail=err.detail)
            return
        if notice.carries_manifest:
            status, detail = await self.run_blocking(lambda: self._hold(notice))
        elif not notice.table_uri:
            self._held(notice, None)
            status, detail = "audit_only", "the event names no table URI"
        else:
            self._held(notice, None)
            status, detail = await self.run_blocking(lambda: self._check(notice))
        metrics.MANIFESTS.labels(status).inc()
        level = logging.INFO if status in ("valid", "audit_only") else logging.WARNING
        log.log(
            level,
            "task manifest %s: %s",
            status,
            detail,
            extra={
                "table": notice.table_id,
                "instant": notice.instant,
                "job_id": notice.job_id,
                "attempt": str(notice.attempt),
            },
        )

    def _hold(self, notice: ManifestNotice) -> tuple[str, str]:
        """Rebuild the manifest the event carries, check it early and hold it (a manifest
        that fails the check is held as a pointer: the job commit reads the saved one)."""
        assert notice.record is not None
        try:
            manifest = announced_manifest(notice.record)
        except CommitError as err:
            self._held(notice, None)
            return "invalid", str(err)
        if manifest is None:  # no digest: the job commit could not check it against storage
            self._held(notice, None)
            return "audit_only", "the event carries a manifest without its digest"
        status, detail = check_announced(notice, manifest)
        self._held(notice, manifest if status == "valid" else None)
        return status, detail

    def _held(self, notice: ManifestNotice, manifest: AnnouncedManifest | None) -> None:
        self.held.add(notice.table_id, notice.job_id, str(notice.attempt), manifest)

    def _check(self, notice: ManifestNotice) -> tuple[str, str]:
        try:
            storage = open_storage(notice.table_uri, self.settings)
        except Exception as err:
            return "invalid", f"cannot open {notice.table_uri}: {err}"
        return check_manifest(storage, notice)
