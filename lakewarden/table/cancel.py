"""``request_cancel``: the irrevocable half of RFC-79's cancellation, in log terms.

A cancel request is the ``cancel_requested`` entry of a cancellable compaction or clustering
plan. Once it is on the timeline the state machine refuses the plan's ``completed`` forever
(invariant 3); the plan can only end ``aborted`` (``lakewarden.tableservice.execute_cancel``
or the plan's own executor, after deleting its files).

It lives beside the timeline rather than in ``lakewarden.tableservice`` because ingestion
calls it too: an ingestion that completed over a pending cancellable plan requests that
plan's cancellation (RFC-79 goal A), and the commit path must not import the table services.

Steps (the RFC's, literally; "transaction" is the table lock):

1. start a transaction (take the table lock);
2. reload the active timeline;
3. the instant is completed: abort (``InstantAlreadyCompletedError``);
4. the instant is aborted: exit without an error (``CancelRequestOutcome.ALREADY_ABORTED``);
   a cancel request already on the log is also a quiet exit (``ALREADY_REQUESTED``);
5. append ``cancel_requested`` with who asked and why (the RFC's file under ``.cancel``);
6. end the transaction.
"""

from __future__ import annotations

import logging
import time
from enum import StrEnum
from typing import Final

from lakewarden.errors import LakewardenError, NonRetryableError
from lakewarden.table import conflicts
from lakewarden.table.coordinator import Coordinator, LeaseLostError
from lakewarden.table.instant import TABLE_SERVICE_ACTIONS, Transition
from lakewarden.table.timeline import Timeline, TimelineState
from lakewarden.table.timeline_state import (
    REASON_PAYLOAD_VERSION,
    EntryDraft,
    InstantState,
)

log = logging.getLogger(__name__)

# The table lock's ttl of a cancel request's transaction (a caller that sends the acquire
# ahead, ``Coordinator.lock_ahead``, sends it for this ttl).
LOCK_TTL_S: Final = 30.0

__all__ = [
    "LOCK_TTL_S",
    "CancelRequestOutcome",
    "InstantAlreadyCompletedError",
    "PlanNotCancellableError",
    "UnknownPlanError",
    "cancel_overtaken_plans",
    "cancel_reason",
    "request_cancel",
]


class InstantAlreadyCompletedError(NonRetryableError):
    """The instant completed: a committed instant cannot be cancelled (RFC-79 step 3)."""


class PlanNotCancellableError(NonRetryableError):
    """The instant is not a plan scheduled with ``cancellable=True`` (or is not a plan)."""


class UnknownPlanError(NonRetryableError):
    """No instant of that name is on the table's timeline."""


class CancelRequestOutcome(StrEnum):
    """How ``request_cancel`` ended (every value means: the instant will never complete)."""

    REQUESTED = "requested"  # this call appended cancel_requested
    ALREADY_REQUESTED = "already_requested"  # a cancel request was on the log already
    ALREADY_ABORTED = "already_aborted"


def cancel_reason(requested_by: str, reason: str) -> str:
    """The text a ``cancel_requested`` entry records: who asked, and why."""
    return f"cancel requested by {requested_by}: {reason}"


def request_cancel(
    timeline: Timeline,
    coordinator: Coordinator,
    table_id: str,
    instant: str,
    *,
    requested_by: str,
    reason: str,
    actor: str,
    lock_ttl_s: float = LOCK_TTL_S,
    lock_wait_s: float = 30.0,
) -> CancelRequestOutcome:
    """Request the cancellation of the cancellable plan ``instant`` (steps in the module
    docstring). Irrevocable: nothing takes a cancel request back.

    Raises: UnknownPlanError, InstantAlreadyCompletedError, PlanNotCancellableError,
    LockTimeoutError, ConcurrentAppendError, CommitStateUnknownError (reload and look)."""
    text = cancel_reason(requested_by, reason)
    with coordinator.lock(table_id, ttl_s=lock_ttl_s, wait_s=lock_wait_s) as lease:  # 1.
        state = timeline.load()  # 2.
        outcome = _verdict(state, table_id, instant)  # 3., 4.
        if outcome is not None:
            return outcome
        if lease.lost:
            raise LeaseLostError(
                f"the lease on table {table_id} was lost before cancel_requested of {instant} "
                "could be appended; nothing was appended. Help: retry.",
                table=table_id,
                instant=instant,
            )
        current = state.get(instant)
        assert current is not None  # _verdict checked it
        draft = EntryDraft(
            instant=instant,
            action=current.action,
            transition=Transition.CANCEL_REQUESTED,
            actor=actor,
            lock_token=lease.token,
            wall_time_ms=time.time_ns() // 1_000_000,
            payload={"version": REASON_PAYLOAD_VERSION, "reason": text},
        )

        def still_cancellable(latest: TimelineState, _draft: EntryDraft) -> None:
            # A rebase (another process appended meanwhile) re-runs steps 3 and 4.
            if _verdict(latest, table_id, instant) is not None:
                raise _Settled()

        try:
            entry, _ = timeline.append(draft, validate=still_cancellable)  # 5.
        except _Settled:
            outcome = _verdict(timeline.load(), table_id, instant)
            assert outcome is not None
            return outcome
    coordinator.announce(table_id, entry)  # 6. (the lock is released above)
    return CancelRequestOutcome.REQUESTED


class _Settled(Exception):
    """The instant was settled by someone else between the load and the append."""


def _verdict(state: TimelineState, table_id: str, instant: str) -> CancelRequestOutcome | None:
    """None when a cancel request may be appended; the quiet outcome, or the named error."""
    current = state.get(instant)
    if current is None:
        raise UnknownPlanError(
            f"instant {instant} is not on the timeline of table {table_id}. Help: list the "
            "table's plans (Table.timeline()) and pass a pending clustering or compaction.",
            table=table_id,
            instant=instant,
        )
    if current.state is Transition.COMPLETED:
        raise InstantAlreadyCompletedError(
            f"cannot cancel a committed instant: {current.action} {instant} of table "
            f"{table_id} completed at seq {current.completed_seq}. Help: a completed plan "
            "stays; nothing was changed.",
            table=table_id,
            instant=instant,
        )
    if current.state is Transition.ABORTED:
        return CancelRequestOutcome.ALREADY_ABORTED
    _require_cancellable(current, table_id)
    if current.state is Transition.CANCEL_REQUESTED:
        return CancelRequestOutcome.ALREADY_REQUESTED
    return None


def _require_cancellable(current: InstantState, table_id: str) -> None:
    if current.action in TABLE_SERVICE_ACTIONS and current.cancellable and current.is_pending:
        return
    what = (
        f"a {current.action} plan scheduled without cancellable=true"
        if current.action in TABLE_SERVICE_ACTIONS
        else f"a {current.action}, not a table-service plan"
    )
    raise PlanNotCancellableError(
        f"instant {current.instant} of table {table_id} is {what} ({current.state}): only "
        "cancellable clustering and compaction plans can be cancelled. Help: a non-cancellable "
        "plan is executed to completion; schedule plans with cancellable=true to make them "
        "cancellable. Nothing was changed.",
        table=table_id,
        instant=current.instant,
    )


def cancel_overtaken_plans(
    timeline: Timeline, coordinator: Coordinator, table_id: str, instant: str, *, actor: str
) -> list[str]:
    """After ingestion ``instant`` completed: request the cancellation of every pending
    cancellable plan it overtook (RFC-79 goal A): requested before the ingestion completed and
    touching one of its file groups. Such a plan can never complete anyway (the conflict rules
    refuse it); the request says so on the log, so that its executor short-circuits and the
    cleaner or ``execute_cancel`` can remove its files. A plan requested after the ingestion
    completed saw its result and is left alone.

    Best effort: the ingestion is committed whatever happens here; a failure is logged and the
    plans are returned only when their request landed."""
    try:
        state = timeline.load()
    except LakewardenError as err:
        # The ingestion completed: an error here must not reach its writer, who would take the
        # commit for failed (the campaign's completed_without_acknowledgement). The plans it
        # overtook can never complete anyway; the cleaner's policy cancels them later.
        log.warning(
            "ingestion %s completed, but reading the timeline to cancel the plans it "
            "overtook failed: %s",
            instant,
            err,
            extra={"table": table_id, "instant": instant},
        )
        return []
    mine = state.get(instant)
    if mine is None or mine.completed_seq is None:
        return []
    overtaken = [
        plan
        for plan in conflicts.cancellable_plans_in_the_way(state, mine)
        if plan.requested_seq < mine.completed_seq
    ]
    cancelled: list[str] = []
    for plan in overtaken:
        try:
            request_cancel(
                timeline,
                coordinator,
                table_id,
                plan.instant,
                requested_by=actor,
                reason=f"ingestion {instant} completed on its file groups and takes precedence",
                actor=actor,
            )
            cancelled.append(plan.instant)
        except LakewardenError as err:
            log.warning(
                "ingestion %s completed, but requesting the cancellation of plan %s failed: %s",
                instant,
                plan.instant,
                err,
                extra={"table": table_id, "instant": instant},
            )
    return cancelled
