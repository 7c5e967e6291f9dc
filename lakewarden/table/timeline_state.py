"""The timeline's persisted records and the state they fold into.

``TimelineEntry`` is one entry of the sequenced log (``.lakewarden/timeline/<seq:020d>.json``);
``EntryDraft`` is what a writer wants to append (everything but the seq, which the append
protocol assigns). ``TimelineState`` is the fold of ``state_machine.apply`` over a prefix of the
log: one ``InstantState`` per instant, the tail seq, and the entries that were ignored as
illegal. All are frozen pydantic; ``timeline`` re-exports them, this module exists only so the
state machine, the conflict rules and the log share them without import cycles.

Payload shapes per transition (checked by the state machine; a malformed payload is rejected):

- requested: ``RequestedPayload`` ``{"operation": str, "cancellable": bool, "plan": ...}``;
  the plan is one of ``lakewarden.table.plans`` (a job, service, clean or rollback plan;
  legacy dicts are upgraded on load);
- inflight: ``WorkloadProfile.model_dump()``; completed: ``CommitStats.model_dump()``;
- cancel_requested, aborted, rolled_back: ``ReasonPayload`` ``{"reason": str}``; a
  ``rolled_back`` written by the commit path (version 2) also names the failed stage, the job
  and the error type as fields.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from lakewarden.table.instant import (
    INGESTION_ACTIONS,
    PENDING_STATES,
    TABLE_SERVICE_ACTIONS,
    Action,
    Instant,
    QualifiedInstant,
    Transition,
)
from lakewarden.table.plans import JobPlan, PlanField
from lakewarden.table.stats import CommitStats, FileGroupId, WorkloadProfile

_INSTANT_PATTERN = r"^\d{17}$"


class EntryDraft(BaseModel):
    """An entry a writer wants to append; the append protocol assigns its seq."""

    model_config = ConfigDict(frozen=True)

    instant: str = Field(pattern=_INSTANT_PATTERN)
    action: Action
    transition: Transition
    actor: str = Field(min_length=1, description="who appends: writer, service or tool id")
    lock_token: int | None = Field(description="fencing token of the lease held, if any")
    wall_time_ms: int = Field(description="the appender's clock, for humans; never for order")
    payload: dict[str, Any] = Field(default_factory=dict)

    def at(self, seq: int) -> TimelineEntry:
        """This draft as the entry with sequence number ``seq``."""
        return TimelineEntry(seq=seq, **self.model_dump())


class TimelineEntry(EntryDraft):
    """Entry ``seq`` of the log: one transition of one instant."""

    seq: int = Field(ge=0)

    @property
    def qualified(self) -> QualifiedInstant:
        return QualifiedInstant(Instant(self.instant), self.action, self.transition)


class RequestedPayload(BaseModel):
    """Payload of a ``requested`` entry."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    operation: str = Field(min_length=1)
    cancellable: bool = False
    plan: PlanField = None


REASON_PAYLOAD_VERSION: Final = 2


class ReasonPayload(BaseModel):
    """Payload of ``cancel_requested``, ``aborted`` and ``rolled_back`` entries.

    Version 1 carried only ``reason``; version 2 adds, for a failed commit, the stage that
    failed, the committer job and the error's type name as fields (entries of version 1 still
    load: the fields are then None)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    version: Literal[1, 2] = 1
    reason: str = Field(min_length=1)
    failed_stage: str | None = None
    job_id: str | None = None
    error_type: str | None = None


class Rejection(BaseModel):
    """An entry that was illegal against its prefix: ignored by every reader, reported."""

    model_config = ConfigDict(frozen=True)

    seq: int
    instant: str | None = None
    action: Action | None = None
    transition: Transition | None = None
    reason: str


class InstantState(BaseModel):
    """Where one instant stands after a prefix of the log."""

    model_config = ConfigDict(frozen=True)

    instant: str
    action: Action
    state: Transition
    cancellable: bool = False
    operation: str | None = None
    requested_seq: int
    last_seq: int
    completed_seq: int | None = None
    # From inflight until completion; a completed instant keeps it only if it replaces_all
    # (its write statistics say what it touched).
    workload: WorkloadProfile | None = None
    commit: CommitStats | None = None
    lock_token: int | None = None
    plan: PlanField = None
    # Compaction/clustering: the file groups the plan rewrites (from ServicePlan).
    plan_file_groups: tuple[FileGroupId, ...] = ()
    # Ingestion: the rollback instant whose intent makes this one uncommittable.
    rollback_by: str | None = None
    # Why it was cancelled, aborted or rolled back; for a failed commit, where and how.
    reason: str | None = None
    failed_stage: str | None = None
    failed_job_id: str | None = None
    error_type: str | None = None

    @property
    def is_pending(self) -> bool:
        return self.state in PENDING_STATES

    @property
    def job_plan(self) -> JobPlan | None:
        """The plan of an ingestion instant written by a committer job, if it is one."""
        return self.plan if isinstance(self.plan, JobPlan) else None

    @property
    def qualified(self) -> QualifiedInstant:
        return QualifiedInstant(Instant(self.instant), self.action, self.state)


class TimelineState(BaseModel):
    """The fold of the state machine over entries ``0..tail_seq`` of the log."""

    model_config = ConfigDict(frozen=True)

    instants: dict[str, InstantState] = Field(default_factory=dict)
    tail_seq: int = -1
    # The newest requested instant time: the floor for the next one.
    last_requested_time: str | None = None
    rejected: tuple[Rejection, ...] = ()

    def get(self, instant: str | Instant) -> InstantState | None:
        return self.instants.get(str(instant))

    def completed(self) -> list[InstantState]:
        """Completed instants in completion (log) order."""
        done = [i for i in self.instants.values() if i.completed_seq is not None]
        done.sort(key=lambda i: i.completed_seq or 0)
        return done

    def pending(self) -> list[InstantState]:
        """Instants not yet in a terminal state (requested, inflight, cancel_requested), in
        requested order."""
        pending = [i for i in self.instants.values() if i.is_pending]
        pending.sort(key=lambda i: i.requested_seq)
        return pending

    def last_requested(self) -> Instant | None:
        """The newest requested instant (``Instant.next_after`` of it is the next instant)."""
        return None if self.last_requested_time is None else Instant(self.last_requested_time)

    # -- the StateView protocol (the state machine's and the conflict rules' read interface) --

    def completed_since(self, seq: int) -> Iterable[InstantState]:
        """Instants completed by an entry after ``seq``, newest first."""
        # A scan, not completed(): sorting every completed instant per check is the cost
        # that grows with the log; the recent ones are few.
        recent = [
            i
            for i in self.instants.values()
            if i.completed_seq is not None and i.completed_seq > seq
        ]
        recent.sort(key=lambda i: i.completed_seq or 0, reverse=True)
        return recent

    def pending_plans(self) -> Iterable[InstantState]:
        """Pending compaction and clustering plans, in requested order."""
        plans = [
            i for i in self.instants.values() if i.action in TABLE_SERVICE_ACTIONS and i.is_pending
        ]
        plans.sort(key=lambda i: i.requested_seq)
        return plans

    def inflight_ingestions(self) -> Iterable[InstantState]:
        """Ingestion instants that are inflight (their workload names the file groups they
        target: RFC-79 step 2), in requested order."""
        found = [
            i
            for i in self.instants.values()
            if i.action in INGESTION_ACTIONS and i.state is Transition.INFLIGHT
        ]
        found.sort(key=lambda i: i.requested_seq)
        return found


class StateView(Protocol):
    """What judging one entry needs to know about its prefix. ``TimelineState`` implements it
    by scanning; the replayer implements it with indexes (same answers, faster)."""

    @property
    def last_requested_time(self) -> str | None: ...

    def get(self, instant: str) -> InstantState | None: ...

    def completed_since(self, seq: int) -> Iterable[InstantState]: ...

    def pending_plans(self) -> Iterable[InstantState]: ...

    def inflight_ingestions(self) -> Iterable[InstantState]: ...
