"""Between Avro records and the committer's values: parsing requests and manifest events,
building results and timeline transitions.

Parsing is where a decodable but unusable event is caught: ``InvalidEvent`` carries the
dead-letter reason (``unexpected_event``, ``key_mismatch``, ``invalid_request``); the worker
only ever sees a well-formed ``CommitRequest``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from lakewarden.commit import InvalidIdError, JobLayout, TaskAttemptId, TaskId
from lakewarden.events import InvalidEvent, make_event
from lakewarden.publish import DeltaPublisher
from lakewarden.settings import CommitterSettings
from lakewarden.table.job_commit import CommitRequest
from lakewarden.table.stats import CommitStats
from lakewarden.table.timeline import TimelineEntry


@dataclass(frozen=True)
class Outcome:
    """How a request ended, as ``JobCommitResult`` reports it."""

    status: str  # committed | failed
    stats: CommitStats | None = None
    reason: str | None = None
    failed_stage: str | None = None
    error_type: str | None = None
    recorded: bool = False
    summary_key: str = ""
    entries: tuple[TimelineEntry, ...] = ()  # what the service appended, to publish
    placed: int = 0
    resumed: bool = False
    # Where the job commit's manifests came from (TaskManifest events, or storage reads).
    manifests_from_events: int = 0
    manifests_from_storage: int = 0
    # The table's Delta publisher when the instant is completed and this process publishes
    # (``publisher_on_commit``): the worker publishes after the answer was sent.
    publisher: DeltaPublisher | None = field(default=None, compare=False, repr=False)

    @property
    def committed(self) -> bool:
        return self.status == "committed"


@dataclass(frozen=True)
class ManifestNotice:
    """A valid ``TaskManifest`` event."""

    table_id: str
    table_uri: str
    instant: str
    job_id: str
    attempt: TaskAttemptId
    manifest_path: str
    file_count: int
    total_bytes: int
    # The decoded event: it may carry the manifest itself (``lakewarden.events.manifests``).
    record: dict[str, Any] | None = None

    @property
    def carries_manifest(self) -> bool:
        return self.record is not None and self.record.get("manifest") is not None


def _check_envelope(name: str, expected: str, record: dict[str, Any], key: bytes | None) -> str:
    if name != expected:
        raise InvalidEvent("unexpected_event", f"a {name} event where {expected} was expected")
    table_id = str(record["envelope"]["table_id"])
    if not table_id or key != table_id.encode():
        raise InvalidEvent("key_mismatch", f"message key {key!r} is not the table id {table_id!r}")
    return table_id


def parse_request(name: str, record: dict[str, Any], *, key: bytes | None) -> CommitRequest:
    """The job a decoded ``JobCommitRequest`` asks to commit.

    Raises: InvalidEvent (``unexpected_event``, ``key_mismatch``, ``invalid_request``)."""
    table_id = _check_envelope(name, "JobCommitRequest", record, key)
    problem = _request_problem(record)
    if problem is not None:
        raise InvalidEvent("invalid_request", problem)
    try:
        stats = CommitStats.model_validate_json(record["commit_stats"])
        metadata = json.loads(record["metadata"] or "{}")
    except (ValidationError, ValueError) as err:
        raise InvalidEvent("invalid_request", f"commit_stats or metadata: {err}") from err
    # ``once``: what clients before the typed ``completed`` payload sent beside a version-1
    # ``commit_stats``, whose micro-batch keys the rule now reads (``CommitStats.batch``).
    once = metadata.get("once", {}) if isinstance(metadata, dict) else None
    if not isinstance(once, dict) or not all(isinstance(v, str) for v in once.values()):
        raise InvalidEvent("invalid_request", "metadata.once must map strings to strings")
    try:
        raw = record.get("committer_options")
        committer = None if raw is None else CommitterSettings.model_validate(raw)
    except ValidationError as err:
        raise InvalidEvent("invalid_request", f"committer_options: {err}") from err
    return CommitRequest(
        table_id=table_id,
        table_uri=record["table_uri"],
        instant=record["instant"],
        job_id=record["job_id"],
        job_attempt=record["job_attempt"],
        accepted=tuple(record["accepted_task_attempt_ids"]),
        stats=stats,
        description=str(metadata.get("description") or ""),
        lock_token=record["lock_token"],
        producer_id=str(record["envelope"]["producer_id"]),
        committer=committer,
    )


def _request_problem(record: dict[str, Any]) -> str | None:
    if not record["table_uri"]:
        return "table_uri is empty: the committer opens the table from it"
    if not record["instant"]:
        return "instant is empty"
    try:
        layout = JobLayout(record["job_id"], record["job_attempt"])
        for attempt in record["accepted_task_attempt_ids"]:
            layout.check_attempt(attempt)
    except InvalidIdError as err:
        return str(err)
    if record["manifest_dir"].rstrip("/") + "/" != layout.manifests_dir:
        return (
            f"manifest_dir {record['manifest_dir']!r} is not the job attempt's "
            f"{layout.manifests_dir!r}"
        )
    return None


def parse_manifest_event(name: str, record: dict[str, Any], *, key: bytes | None) -> ManifestNotice:
    """A decoded ``TaskManifest``. Raises: InvalidEvent."""
    table_id = _check_envelope(name, "TaskManifest", record, key)
    try:
        attempt = TaskAttemptId.parse(record["task_attempt_id"])
        task = TaskId.parse(record["task_id"])
    except InvalidIdError as err:
        raise InvalidEvent("invalid_request", str(err)) from err
    if attempt.job_id != record["job_id"] or attempt.task_id != task:
        raise InvalidEvent(
            "invalid_request",
            f"attempt {attempt} is not an attempt of task {task} of job {record['job_id']}",
        )
    if record["file_count"] < 0 or record["total_bytes"] < 0:
        raise InvalidEvent("invalid_request", "file_count and total_bytes must be >= 0")
    return ManifestNotice(
        table_id=table_id,
        table_uri=record["table_uri"],
        instant=record["instant"],
        job_id=record["job_id"],
        attempt=attempt,
        manifest_path=record["manifest_path"],
        file_count=record["file_count"],
        total_bytes=record["total_bytes"],
        record=record,
    )


def result_record(job: CommitRequest, outcome: Outcome, *, producer_id: str) -> dict[str, Any]:
    """The ``JobCommitResult`` event that answers ``job``."""
    return result_for(
        table_id=job.table_id,
        instant=job.instant,
        job_id=job.job_id,
        outcome=outcome,
        producer_id=producer_id,
    )


def result_for(
    *, table_id: str, instant: str, job_id: str, outcome: Outcome, producer_id: str
) -> dict[str, Any]:
    return make_event(
        "JobCommitResult",
        table_id=table_id,
        producer_id=producer_id,
        instant=instant,
        job_id=job_id,
        status=outcome.status,
        reason=outcome.reason,
        failed_stage=outcome.failed_stage,
        stats=outcome.stats.model_dump_json() if outcome.stats is not None else "{}",
        error_type=outcome.error_type,
        recorded=outcome.recorded,
        summary_key=outcome.summary_key,
    )


def refusal_for(record: dict[str, Any], err: InvalidEvent) -> dict[str, Any] | None:
    """A ``failed`` result for an invalid request that names its instant and job, so its
    sender is told at once instead of timing out; None when it cannot be addressed."""
    instant, job_id = record.get("instant"), record.get("job_id")
    table_id = str(record.get("envelope", {}).get("table_id") or "")
    if err.reason != "invalid_request" or not (instant and job_id and table_id):
        return None
    outcome = Outcome(
        status="failed",
        reason=f"invalid request: {err.detail}",
        failed_stage="check_request",
        error_type="InvalidRequest",
    )
    return result_for(
        table_id=table_id,
        instant=str(instant),
        job_id=str(job_id),
        outcome=outcome,
        producer_id="job-committer",
    )
