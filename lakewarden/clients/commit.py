"""CommitClient: ask the job-committer service to commit a job, and wait for its answer.

    client = CommitClient(settings)
    reply = client.commit(CommitRequest(table_uri=uri, table_id=table.table_id,
                                        instant=instant, job_id=job_id,
                                        accepted=attempt_ids, stats=stats), timeout_s=120)
    reply.stats          # what the instant's `completed` entry carries
    client.close()

``commit``:

1. reads every partition of ``job.results`` from its current end, so the answer cannot be
   missed however fast it comes (no consumer group: nothing is committed, nothing rebalances);
2. sends the ``JobCommitRequest`` keyed by table id and waits until the broker has it;
3. reads results until the one for this instant and job arrives: ``committed`` returns a
   ``CommitReply``; ``failed`` raises ``JobCommitFailedError`` naming the stage and the error
   (the service has rolled the instant back and aborted the job), or
   ``CommitStateUnknownError`` when the service itself could not settle the outcome;
4. no answer within ``timeout_s``: ``CommitStateUnknownError`` with the instant and how to
   check. It never resends on its own: the service may be committing right now. The request is
   durable in Kafka and the service resumes it after a crash, so the outcome will be on the
   timeline; ``check_commit`` reads it. (Sending the *same* request again is safe: the service
   answers a duplicate with the recorded result. Starting a new job for the same data is not.)

No network IO happens until the first ``commit``. One client serves one request at a time
(calls from several threads take turns).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from lakewarden.clients._results import listen_from_end
from lakewarden.commit import JobLayout, SavedManifest, SuccessData, TaskAttemptId
from lakewarden.errors import CommitStateUnknownError, NonRetryableError, RetryableError
from lakewarden.events import (
    EventConsumer,
    EventDeliveryError,
    EventProducer,
    make_event,
)
from lakewarden.events.manifests import task_manifest_event
from lakewarden.events.topics import JOB_REQUESTS, JOB_RESULTS, TASK_MANIFESTS
from lakewarden.extras import missing_extra
from lakewarden.settings import CommitterSettings, Settings
from lakewarden.storage import NotFoundError, open_storage
from lakewarden.table.instant import Transition
from lakewarden.table.job_commit import CommitRequest
from lakewarden.table.stats import CommitStats
from lakewarden.table.timeline import Timeline

try:
    from confluent_kafka import Message
except ImportError as err:
    raise missing_extra("kafka", "Kafka support", err) from err

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 300.0


class JobCommitFailedError(NonRetryableError):
    """The job-committer refused or failed the commit; the instant is rolled back and the job
    aborted. ``stage`` is the step that failed, ``error_type`` the error's class name (a
    conflict rule's name for a conflict), ``reason`` the service's message."""

    def __init__(
        self,
        message: str,
        *,
        table: str,
        instant: str,
        job_id: str,
        stage: str | None,
        error_type: str | None,
        reason: str,
    ) -> None:
        super().__init__(message, table=table, instant=instant)
        self.job_id = job_id
        self.stage = stage
        self.error_type = error_type
        self.reason = reason


class CommitServiceUnavailableError(RetryableError):
    """The job-committer's topics cannot be reached; nothing was sent."""


@dataclass(frozen=True)
class AttemptManifest:
    """A committed task attempt's manifest, announced as a ``TaskManifest`` event before the
    request (the service's audit trail and early validation); with ``saved``, the event
    carries the manifest itself when it fits, and the job commit need not read it."""

    attempt_id: str
    manifest_key: str
    file_count: int
    total_bytes: int
    saved: SavedManifest | None = None


@dataclass(frozen=True)
class CommitReply:
    """A committed job: the instant is completed with ``stats``."""

    instant: str
    job_id: str
    stats: CommitStats
    recorded: bool  # the job had finished before: this is its recorded result
    summary_key: str


CommitStateName = Literal["committed", "rolled_back", "pending", "unknown_instant", "other"]


@dataclass(frozen=True)
class CommitState:
    """What storage says about an instant and its job (``check_commit``)."""

    state: CommitStateName
    instant_state: str | None
    job_summary: str | None  # the _SUCCESS state: COMMITTED, FAILED, ABORTED, or None
    reason: str | None
    # A rolled-back commit: the stage that failed and the error's type (its entry's fields).
    failed_stage: str | None = None
    error_type: str | None = None


class CommitClient:
    """Requests job commits from job-committer. Thread-safe; close it when done."""

    def __init__(self, settings: Settings, *, producer_id: str | None = None) -> None:
        self.settings = settings
        self.producer_id = producer_id or f"commit-client@{socket.gethostname()}:{os.getpid()}"
        self._guard = threading.Lock()
        self._producer: EventProducer | None = None
        self._consumer: EventConsumer | None = None

    def commit(
        self,
        request: CommitRequest,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        manifests: Sequence[AttemptManifest] = (),
    ) -> CommitReply:
        """Steps 1-4 of the module docstring; ``manifests`` are announced first (one
        ``TaskManifest`` event each, delivered with the request).

        Raises:
            CommitServiceUnavailableError: the topics cannot be reached (nothing was sent).
            JobCommitFailedError: the service failed the commit (rolled back, job aborted).
            CommitStateUnknownError: no answer in time, the request's delivery is unknown, or
                the service could not settle the outcome. Check with ``check_commit``.
        """
        with self._guard:
            deadline = time.monotonic() + timeout_s
            consumer = self._listen()  # 1.
            self._send(request, manifests)  # 2.
            while (left := deadline - time.monotonic()) > 0:  # 3.
                message = consumer.poll_message(min(0.5, left))  # returns at the first one
                reply = None if message is None else self._match(request, message)
                if reply is not None:
                    return reply
            raise _unknown(request, f"no answer from job-committer within {timeout_s:g} s")

    def connect(self) -> None:
        """Do now what the first ``commit`` would do before sending: assign the results
        consumer at the topic's end and connect the producer to the request topics. A
        caller with other work to do first (a streaming query's first micro-batch) runs this
        beside it, so that its first commit costs a request's round trip, not the clients'
        start. A ``commit`` meanwhile waits for it.

        Raises:
            CommitServiceUnavailableError: the results topic cannot be read.
            RetryableError: the broker did not answer the producer in time.
        """
        with self._guard:
            self._listen()
            producer = self._request_producer()
            for topic in (TASK_MANIFESTS, JOB_REQUESTS):
                producer.connect(topic)

    def close(self) -> None:
        """Close the Kafka clients (a later ``commit`` opens new ones)."""
        with self._guard:
            consumer, self._consumer = self._consumer, None
            producer, self._producer = self._producer, None
        if consumer is not None:
            consumer.close()
        if producer is not None:
            try:
                producer.close(timeout_s=5)
            except EventDeliveryError as err:
                log.warning("closing the commit client: %s", err)

    def __enter__(self) -> CommitClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------

    def _listen(self) -> EventConsumer:
        self._consumer = listen_from_end(
            self._consumer,
            self.settings,
            JOB_RESULTS,
            client="commit-client",
            service="job-committer",
            unavailable=CommitServiceUnavailableError,
            log=log,
        )
        return self._consumer

    def _request_producer(self) -> EventProducer:
        if self._producer is None:
            self._producer = EventProducer(self.settings, producer_id=self.producer_id, linger_ms=0)
        return self._producer

    def _send(self, request: CommitRequest, manifests: Sequence[AttemptManifest]) -> None:
        producer = self._request_producer()
        for manifest in manifests:
            record = manifest_record(request, manifest, self.producer_id)
            producer.send("TaskManifest", record)
        producer.send("JobCommitRequest", request_record(request, self.producer_id))
        try:
            producer.flush()
        except EventDeliveryError as err:
            raise _unknown(request, f"the request's delivery is unknown ({err})") from err

    def _match(self, request: CommitRequest, message: Message) -> CommitReply | None:
        assert self._consumer is not None, "listening"
        event = self._consumer.decode(message)  # None: undecodable, logged and skipped
        if event is None or event.name != "JobCommitResult":
            return None
        record = event.record
        if record["job_id"] != request.job_id or record["instant"] != request.instant:
            return None
        return reply_from_record(request, record)


def request_record(request: CommitRequest, producer_id: str) -> dict[str, Any]:
    """The ``JobCommitRequest`` event of ``request``."""
    layout = JobLayout(request.job_id, request.job_attempt)
    # The micro-batch (the ``once`` rule) travels in ``commit_stats`` (``CommitStats.batch``).
    metadata = {"description": request.description}
    return make_event(
        "JobCommitRequest",
        table_id=request.table_id,
        producer_id=producer_id,
        instant=request.instant,
        job_id=request.job_id,
        job_attempt=request.job_attempt,
        accepted_task_attempt_ids=[str(a) for a in request.accepted],
        manifest_dir=layout.manifests_dir,
        lock_token=request.lock_token,
        metadata=json.dumps(metadata, sort_keys=True),
        table_uri=request.table_uri,
        commit_stats=request.stats.model_dump_json(),
        committer_options=_committer_record(request.committer),
    )


def _committer_record(committer: CommitterSettings | None) -> dict[str, Any] | None:
    return None if committer is None else committer.for_request()


def manifest_record(
    request: CommitRequest, manifest: AttemptManifest, producer_id: str
) -> dict[str, Any]:
    """The ``TaskManifest`` event announcing one attempt of ``request``'s job."""
    attempt = TaskAttemptId.parse(manifest.attempt_id)
    return task_manifest_event(
        table_id=request.table_id,
        producer_id=producer_id,
        job_id=request.job_id,
        task_id=str(attempt.task_id),
        attempt_id=manifest.attempt_id,
        instant=request.instant,
        manifest_key=manifest.manifest_key,
        file_count=manifest.file_count,
        total_bytes=manifest.total_bytes,
        table_uri=request.table_uri,
        saved=manifest.saved,
    )


def reply_from_record(request: CommitRequest, record: Mapping[str, Any]) -> CommitReply:
    """The reply a ``JobCommitResult`` record carries.

    Raises: JobCommitFailedError, CommitStateUnknownError (the service could not tell)."""
    if record["status"] == "committed":
        return CommitReply(
            instant=request.instant,
            job_id=request.job_id,
            stats=CommitStats.model_validate_json(record["stats"]),
            recorded=bool(record.get("recorded")),
            summary_key=str(record.get("summary_key") or ""),
        )
    reason = str(record.get("reason") or "no reason given")
    error_type = record.get("error_type")
    if error_type == CommitStateUnknownError.__name__:
        raise _unknown(request, f"job-committer could not settle the outcome: {reason}")
    stage = record.get("failed_stage")
    raise JobCommitFailedError(
        f"job-committer failed the commit of job {request.job_id} (instant {request.instant} "
        f"of table {request.table_uri}) at stage {stage}: {reason}",
        table=request.table_id,
        instant=request.instant,
        job_id=request.job_id,
        stage=stage,
        error_type=error_type,
        reason=reason,
    )


def _unknown(request: CommitRequest, why: str) -> CommitStateUnknownError:
    summary = JobLayout(request.job_id, request.job_attempt).summary_key
    return CommitStateUnknownError(
        f"commit state unknown for instant {request.instant} of table {request.table_uri} "
        f"(job {request.job_id}): {why}. Help: do not start a new write of the same data. "
        f"The request is durable and job-committer resumes it; check the outcome with "
        f"lakewarden.clients.check_commit({request.table_uri!r}, {request.instant!r}, "
        f"{request.job_id!r}): the instant's state on the timeline (completed or rolled_back) "
        f"decides, and {request.table_uri.rstrip('/')}/{summary} records the job's file "
        "placement. Sending the same request again is safe (a finished job answers with its "
        "recorded result).",
        table=request.table_id,
        instant=request.instant,
    )


def check_commit(
    table_uri: str, instant: str, job_id: str, *, settings: Settings | None = None
) -> CommitState:
    """What storage says about ``instant`` and ``job_id``: the timeline decides whether the
    instant committed; the job's ``_SUCCESS`` tells how far its file placement got.

    Raises: StorageError, ConfigurationError, InvalidIdError, CommitError (a malformed
    summary)."""
    storage = open_storage(table_uri, settings)
    key = JobLayout(job_id).summary_key  # InvalidIdError for a malformed job id
    try:
        summary: SuccessData | None = SuccessData.from_bytes(storage.read(key), key=key)
    except NotFoundError:
        summary = None
    job_state = summary.state if summary is not None else None
    mine = Timeline(storage).load().get(instant)
    if mine is None:
        return CommitState("unknown_instant", None, job_state, None)
    state: CommitStateName = "other"
    if mine.state is Transition.COMPLETED:
        state = "committed"
    elif mine.state is Transition.ROLLED_BACK:
        state = "rolled_back"
    elif mine.is_pending:
        state = "pending"
    return CommitState(
        state, str(mine.state), job_state, mine.reason, mine.failed_stage, mine.error_type
    )
