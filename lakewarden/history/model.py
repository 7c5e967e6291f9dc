"""The story of a table, as the events on Kafka tell it: plain frozen records.

The fold (``lakewarden.history.fold``) builds these from decoded events; ``explain`` and the
CLI read them. Times are epoch milliseconds; ``broker_ms`` is the Kafka message timestamp
(LogAppendTime on the heartbeats topic, so it is the time heartbeat-monitor judged by),
``event_ms`` the producer's envelope time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple


class Recorded(NamedTuple):
    """A decoded event and where it was read: the fold's input. A named tuple (immutable,
    like the other records) because the reader builds one per message: its constructor is
    one C call (``new_recorded``), where a frozen dataclass sets each field in Python."""

    name: str
    record: dict[str, Any]
    topic: str = ""
    partition: int = 0
    offset: int = 0
    broker_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Unreadable:
    """A message that could not be decoded (malformed, or a schema this process does not
    know, e.g. a newer version) or that decoded but does not make sense: reported, skipped."""

    topic: str
    partition: int
    offset: int
    reason: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class RetentionGap:
    """Part of a topic partition is gone: offsets below ``low_offset`` were deleted by
    retention, so every event older than ``first_kept_ms`` (when known) is missing."""

    topic: str
    partition: int
    low_offset: int
    first_kept_ms: int | None = None


@dataclass(frozen=True, slots=True)
class LockGrant:
    """One acquire of the table lock: who asked, when, and the token it was granted."""

    request_id: str
    owner: str
    requested_ms: int | None = None
    granted_ms: int | None = None
    token: int | None = None
    refused: str | None = None
    expired_ms: int | None = None
    released_ms: int | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatTrail:
    """The heartbeats of one (instant, owner), in broker time."""

    owner: str
    interval_ms: int
    tolerable_misses: int
    beats: int = 0
    first_ms: int | None = None
    last_ms: int | None = None
    longest_gap_ms: int = 0
    missing_seqs: tuple[int, ...] = ()
    final_ms: int | None = None
    longest_gap_from_ms: int | None = None  # the beat the longest gap followed (for the chart)


@dataclass(frozen=True, slots=True)
class Expiry:
    """heartbeat-monitor declared the owner of an instant dead."""

    owner: str
    last_seen_ms: int
    detected_ms: int
    tolerance_ms: int
    frontier_ms: int | None
    monitor: str


@dataclass(frozen=True, slots=True)
class TaskAttempt:
    """A task attempt's saved manifest; ``accepted`` once a commit request names it."""

    task_id: str
    task_attempt_id: str
    job_id: str
    file_count: int
    total_bytes: int
    accepted: bool = False


@dataclass(frozen=True, slots=True)
class JobRequest:
    """A Spark driver's request to commit a job."""

    job_id: str
    job_attempt: int
    accepted: tuple[str, ...]
    lock_token: int | None
    requester: str
    event_ms: int


@dataclass(frozen=True, slots=True)
class JobResult:
    """How job-committer ended a job commit."""

    job_id: str
    status: str
    failed_stage: str | None
    error_type: str | None
    reason: str | None
    recorded: bool
    committer: str
    event_ms: int


@dataclass(frozen=True, slots=True)
class Step:
    """One timeline transition as the timeline topic recorded it."""

    seq: int
    transition: str
    action: str
    actor: str
    lock_token: int | None
    wall_ms: int
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CancelStep:
    """A cancel request (``kind`` request or execute) and the cancel-manager's outcome."""

    request_id: str
    kind: str
    requester: str
    reason: str | None
    requested_ms: int
    outcome: str | None = None
    outcome_reason: str | None = None


@dataclass(frozen=True, slots=True)
class InstantStory:
    """Everything the events say about one instant, each list oldest first."""

    instant: str
    steps: tuple[Step, ...] = ()
    heartbeats: tuple[HeartbeatTrail, ...] = ()
    expiries: tuple[Expiry, ...] = ()
    attempts: tuple[TaskAttempt, ...] = ()
    job_requests: tuple[JobRequest, ...] = ()
    job_results: tuple[JobResult, ...] = ()
    cancels: tuple[CancelStep, ...] = ()
    error_records: int = 0

    @property
    def state(self) -> str | None:
        """The last transition the timeline topic recorded, or None when it recorded none."""
        return self.steps[-1].transition if self.steps else None

    def step(self, transition: str) -> Step | None:
        """The first recorded step of ``transition``, if any."""
        return next((s for s in self.steps if s.transition == transition), None)


@dataclass(frozen=True, slots=True)
class TableHistory:
    """A table's stories by instant, plus what belongs to the table as a whole."""

    table_id: str
    stories: dict[str, InstantStory] = field(default_factory=dict)
    locks: tuple[LockGrant, ...] = ()
    error_records: int = 0
    dead_letters: tuple[Unreadable, ...] = ()
    unreadable: tuple[Unreadable, ...] = ()
    gaps: tuple[RetentionGap, ...] = ()
    events: int = 0

    def story(self, instant: str) -> InstantStory | None:
        return self.stories.get(instant)

    def grant(self, token: int | None) -> LockGrant | None:
        """The lock grant that carried ``token``."""
        if token is None:
            return None
        return next((g for g in self.locks if g.token == token), None)

    def ordered(self) -> list[InstantStory]:
        """Stories oldest first (instant times sort chronologically)."""
        return [self.stories[k] for k in sorted(self.stories)]
