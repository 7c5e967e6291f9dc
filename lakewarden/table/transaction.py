"""A write transaction: one instant from ``requested`` to ``completed`` or ``rolled_back``.

    tx = WriteTransaction.begin(timeline, coordinator, table_id, operation="upsert", actor=me)
    tx.inflight(WorkloadProfile(operation="upsert", file_groups=...))
    ... write data files (invisible until completed: no completed instant names them) ...
    try:
        tx.complete(CommitStats(...))
    except WriteConflictError:
        ... delete the files written ...   # only this writer could complete the instant
        tx.rollback("conflict")
        raise
    except CommitStateUnknownError:
        tx.rollback("outcome unknown")      # first: if our completed landed, this raises
        ... delete the files written ...    # IllegalTransitionError and the files must stay
        raise

``WriteTransaction.resume(timeline, coordinator, table_id, instant, actor=...)`` carries on an
instant begun elsewhere (the job-committer service completes the instants Spark drivers
requested); it appends nothing itself.

Every entry is appended under the table lock (taken per step, not held across the file
writes), records the lease token, and is announced through the coordinator (with Kafka: a
``TimelineTransition`` on the timeline topic, the source of ``lakewarden replay``). The
lock only makes writers take turns; the conflict rules, checked against the log at
completion and re-checked after every rebase, decide.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from lakewarden.errors import NonRetryableError
from lakewarden.table import conflicts
from lakewarden.table.coordinator import Coordinator, Lease, LeaseLostError
from lakewarden.table.instant import INGESTION_ACTIONS, Action, Instant, Transition
from lakewarden.table.plans import Plan
from lakewarden.table.stats import CommitStats, WorkloadProfile
from lakewarden.table.timeline import (
    IllegalTransitionError,
    InstantState,
    Timeline,
    TimelineEntry,
    TimelineState,
)
from lakewarden.table.timeline_state import REASON_PAYLOAD_VERSION, EntryDraft, ReasonPayload


class UnknownInstantError(NonRetryableError):
    """``WriteTransaction.resume`` of an instant that is not on the table's timeline."""


class WriteTransaction:
    """One instant's way through the timeline; create it with ``begin``."""

    def __init__(
        self,
        timeline: Timeline,
        coordinator: Coordinator,
        table_id: str,
        *,
        instant: str,
        action: Action,
        operation: str,
        actor: str,
        lock_ttl_s: float = 30.0,
        lock_wait_s: float = 30.0,
        announce: bool = True,
    ) -> None:
        self.timeline = timeline
        self.coordinator = coordinator
        self.table_id = table_id
        self.instant = instant
        self.action = action
        self.operation = operation
        self.actor = actor
        self._lock_ttl_s = lock_ttl_s
        self._lock_wait_s = lock_wait_s
        self._announce = announce

    @classmethod
    def begin(
        cls,
        timeline: Timeline,
        coordinator: Coordinator,
        table_id: str,
        *,
        operation: str,
        actor: str,
        action: Action = Action.COMMIT,
        cancellable: bool = False,
        plan: Plan | None = None,
        lock_ttl_s: float = 30.0,
        lock_wait_s: float = 30.0,
    ) -> WriteTransaction:
        """Start an instant: append its ``requested`` entry.

        Protocol:
          1. Take the table lock.
          2. Load the timeline; the instant time is ``Instant.next_after(last requested)``.
          3. Append ``requested`` {operation, cancellable, plan} with the lease token (the
             plan is one of ``lakewarden.table.plans``, e.g. the ``JobPlan`` naming the
             committer job); on a rebase step 2 runs again, so the time stays after every
             requested instant.
          4. Release the lock.

        Raises: LockTimeoutError, IllegalTransitionError (e.g. a malformed plan),
        ConcurrentAppendError, CommitStateUnknownError.
        """
        payload = requested_payload(operation, plan, cancellable=cancellable)
        coordinator.before_requested(table_id, actor)
        with coordinator.lock(table_id, ttl_s=lock_ttl_s, wait_s=lock_wait_s) as lease:  # 1.

            def draft(state: TimelineState) -> EntryDraft:
                instant = Instant.next_after(state.last_requested())  # 2.
                return _draft(str(instant), action, Transition.REQUESTED, actor, lease, payload)

            entry, _ = timeline.append(draft)  # 3.
        coordinator.announce(table_id, entry)
        return cls(
            timeline,
            coordinator,
            table_id,
            instant=entry.instant,
            action=action,
            operation=operation,
            actor=actor,
            lock_ttl_s=lock_ttl_s,
            lock_wait_s=lock_wait_s,
        )

    @classmethod
    def resume(
        cls,
        timeline: Timeline,
        coordinator: Coordinator,
        table_id: str,
        instant: str,
        *,
        actor: str,
        lock_ttl_s: float = 30.0,
        lock_wait_s: float = 30.0,
        announce: bool = True,
    ) -> WriteTransaction:
        """A handle on an instant another process (or an earlier run) began, to carry it on:
        the job-committer completes or rolls back instants that a Spark driver requested.

        Appends nothing: the action and operation come from the log, and every later step is
        judged by the state machine as usual (a terminal instant refuses further transitions).
        ``announce=False``: the caller publishes the entries it appends itself (the
        job-committer service does, in order with its result).

        Raises: UnknownInstantError (no such instant on the log)."""
        current = timeline.load().get(instant)
        if current is None:
            raise UnknownInstantError(
                f"instant {instant} is not on the timeline of table {table_id}. Help: the "
                "request names an instant that was never requested on this table (wrong table "
                "URI?).",
                table=table_id,
                instant=instant,
            )
        return cls(
            timeline,
            coordinator,
            table_id,
            instant=instant,
            action=current.action,
            operation=current.operation or "",
            actor=actor,
            lock_ttl_s=lock_ttl_s,
            lock_wait_s=lock_wait_s,
            announce=announce,
        )

    def status(self) -> InstantState | None:
        """Where the instant stands now (reloads the timeline)."""
        return self.timeline.load().get(self.instant)

    def heartbeat(self) -> AbstractContextManager[None]:
        """Declare this instant alive for the ``with`` block (hold it while writing files)."""
        return self.coordinator.heartbeat(self.table_id, self.instant, self.actor)

    def inflight(self, workload: WorkloadProfile) -> None:
        """Record the workload profile (the file groups the write will touch).

        For an ingestion this is RFC-79's step 2: the conflict rules run for the declared
        file groups first, so an ingestion that a completed instant (a cancellable plan that
        completed before this step, say) or a pending non-cancellable plan already beats
        stops here, before it writes anything, instead of at completion.

        Raises: OverlappingCommitConflict, PendingPlanConflict (an ingestion: nothing
        appended, roll it back), IllegalTransitionError (not requested any more: rolled back,
        cancelled, or a rollback intent targets it), ConcurrentAppendError,
        CommitStateUnknownError.
        """

        def step_two(state: TimelineState, draft: EntryDraft) -> None:
            current = state.get(self.instant)
            if current is None or current.state is not Transition.REQUESTED:
                return  # the state machine names what is wrong
            if current.action in INGESTION_ACTIONS:
                declared = current.model_copy(update={"workload": workload})
                conflicts.check_completion(state, declared, None, table=self.table_id)

        self._append(Transition.INFLIGHT, entry_payload(workload), step_two)

    def complete(
        self,
        stats: CommitStats,
        *,
        validate: Callable[[TimelineState], None] | None = None,
    ) -> TimelineEntry:
        """Make the write visible: append ``completed`` with the write statistics.

        Protocol:
          1. Take the table lock.
          2. Load the timeline (the whole prefix).
          3. Check that our heartbeat was not lost (a writer declared dead may have been
             rolled back by the cleaner), then run the conflict rules for the entries after
             our ``requested``, then the caller's ``validate(state)`` (a rule of its own, such
             as "this micro-batch was not committed yet"); whatever they raise stops the
             append and leaves the instant pending, so the caller can ``rollback`` and delete
             its files.
          4. Append ``completed`` (the state machine re-checks); a rebase re-runs step 3.
          5. Release the lock.

        Raises: HeartbeatLostError (from the coordinator), OverlappingCommitConflict,
        PendingPlanConflict, whatever ``validate`` raises, IllegalTransitionError
        (cancel requested, rollback intent, not inflight), LockTimeoutError,
        ConcurrentAppendError, CommitStateUnknownError (reconcile with ``status()``).
        """

        def checks(state: TimelineState, draft: EntryDraft) -> None:  # 3.
            self.coordinator.check_heartbeat(self.table_id, self.instant)
            current = state.get(self.instant)
            if current is not None and current.is_pending:
                conflicts.check_completion(state, current, stats, table=self.table_id)
            if validate is not None:
                validate(state)

        return self._append(Transition.COMPLETED, entry_payload(stats), checks)

    def rollback(
        self,
        reason: str,
        *,
        failed_stage: str | None = None,
        job_id: str | None = None,
        error_type: str | None = None,
    ) -> None:
        """Append ``rolled_back``; a no-op when the instant is rolled back already. A failed
        commit names the stage that failed, its job and the error's type (typed fields of the
        payload, read back as ``InstantState.failed_stage`` etc.).

        After a named conflict the writer may delete its files first (nobody else completes
        its instant). After ``CommitStateUnknownError`` it must call this first: the lost
        ``completed`` may have landed, and then this raises and the files must stay.

        Raises: IllegalTransitionError (completed, or not an ingestion instant),
        LockTimeoutError, ConcurrentAppendError, CommitStateUnknownError.
        """
        current = self.status()
        if current is not None and current.state is Transition.ROLLED_BACK:
            return
        try:
            # Not validated here: the state machine judges the payload (an empty reason is an
            # IllegalTransitionError, like every malformed entry).
            payload = ReasonPayload.model_construct(
                version=REASON_PAYLOAD_VERSION,
                reason=reason,
                failed_stage=failed_stage,
                job_id=job_id,
                error_type=error_type,
            )
            self._append(Transition.ROLLED_BACK, payload.model_dump(mode="json", exclude_none=True))
        except IllegalTransitionError:
            current = self.status()
            if current is not None and current.state is Transition.ROLLED_BACK:
                return  # someone else (the cleaner) rolled it back meanwhile
            raise

    def _append(
        self,
        transition: Transition,
        payload: dict[str, Any],
        validate: Callable[[TimelineState, EntryDraft], None] | None = None,
    ) -> TimelineEntry:
        with self.coordinator.lock(
            self.table_id, ttl_s=self._lock_ttl_s, wait_s=self._lock_wait_s
        ) as lease:

            def draft(state: TimelineState) -> EntryDraft:
                return _draft(self.instant, self.action, transition, self.actor, lease, payload)

            entry, _ = self.timeline.append(draft, validate=validate)
        if self._announce:
            self.coordinator.announce(self.table_id, entry)
        self.timeline.appended(entry)  # the Delta publisher, when publishing is on
        return entry


# Typed fields of some actions only: left out of the JSON when unset, so an entry carries
# what its action records and nothing else.
_OPTIONAL_FIELDS = (
    "attempt",
    "rollback_target",
    "clean",
    "job_id",
    "batch",
    "error_sources",
    "input_records",
    "deleted_records",
)


def entry_payload(model: WorkloadProfile | CommitStats) -> dict[str, Any]:
    """An ``inflight`` or ``completed`` payload as JSON; the fields of some actions (the
    ``_OPTIONAL_FIELDS``) only when they are set."""
    dumped = model.model_dump(mode="json")
    for key in _OPTIONAL_FIELDS:
        if key in dumped and dumped[key] in (None, []):
            del dumped[key]
    return dumped


def requested_payload(
    operation: str, plan: Plan | None, *, cancellable: bool = False
) -> dict[str, Any]:
    """The payload of a ``requested`` entry (the typed plan as JSON)."""
    dumped = plan.model_dump(mode="json") if plan is not None else None
    return {"operation": operation, "cancellable": cancellable, "plan": dumped}


def _draft(
    instant: str,
    action: Action,
    transition: Transition,
    actor: str,
    lease: Lease,
    payload: dict[str, Any],
) -> EntryDraft:
    # The last moment before an append: a holder whose lease is gone stops here. (Safety does
    # not depend on it: a pause between this check and the write is judged by the log.)
    if lease.lost:
        raise LeaseLostError(
            f"the lease on table {lease.table_id} (token {lease.token}) was lost before "
            f"{transition} of {instant} could be appended; nothing was appended. "
            "Help: retry the step; it takes the lock again and re-validates.",
            table=lease.table_id,
            instant=instant,
        )
    return EntryDraft(
        instant=instant,
        action=action,
        transition=transition,
        actor=actor,
        lock_token=lease.token,
        wall_time_ms=time.time_ns() // 1_000_000,
        payload=payload,
    )
