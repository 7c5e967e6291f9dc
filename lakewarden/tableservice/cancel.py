"""RFC-79's cancel APIs: ``request_cancel`` (re-exported from ``lakewarden.table.cancel``)
and ``execute_cancel``, and ``finish_abort``, the one place a plan ends ``aborted``.

``execute_cancel`` steps (the RFC's, literally; "transaction" is the table lock):

1. start a transaction;
2. reload the active timeline;
3. the instant is aborted already: exit without an error (the RFC then deletes the file under
   ``.cancel``; in log terms the ``aborted`` entry supersedes the request, nothing to delete);
4. the instant has an active heartbeat: abort (``PlanStillExecutingError`` naming the owner).
   Stricter than the RFC: only positive knowledge of the executor's death goes on
   (``lakewarden.table.death``): a fresh claim of an executor not judged yet is alive too,
   and no verdict at all (heartbeat-monitor down, its view unreadable) refuses with
   ``LivenessUnknownError`` instead of counting as dead;
5. end the transaction;
6. roll back the target instant without deleting the plan (``rollback.roll_back_attempts``);
7. start a transaction;
8. transition the instant to ``aborted``;
9. (delete the ``.cancel`` file: nothing to do in a log, see 3.);
10. end the transaction.

Beyond the RFC, ``execute_cancel`` of a completed instant raises
``InstantAlreadyCompletedError``, of a non-cancellable plan ``PlanNotCancellableError``, and
of a plan whose cancellation was never requested ``CancelNotRequestedError`` (request it
first: the request is what makes deleting the files safe). Rerun after a crash at any step,
it finishes: every step is idempotent (a rollback deletes what is left, ``aborted`` is
appended once).
"""

from __future__ import annotations

from enum import StrEnum

from lakewarden.table.cancel import CancelRequestOutcome, request_cancel
from lakewarden.table.death import DeathVerdict, unknown_error, verdict
from lakewarden.table.instant import Transition
from lakewarden.table.timeline import IllegalTransitionError
from lakewarden.table.timeline_state import EntryDraft, TimelineState
from lakewarden.tableservice.context import ServiceContext
from lakewarden.tableservice.errors import (
    CancelNotRequestedError,
    PlanNotCancellableError,
    PlanStillExecutingError,
)
from lakewarden.tableservice.plan_state import pending_plan
from lakewarden.tableservice.rollback import roll_back_attempts

__all__ = [
    "CancelRequestOutcome",
    "ExecuteCancelOutcome",
    "execute_cancel",
    "finish_abort",
    "request_cancel",
]


class ExecuteCancelOutcome(StrEnum):
    ABORTED = "aborted"  # this call appended aborted
    ALREADY_ABORTED = "already_aborted"


def execute_cancel(
    ctx: ServiceContext, instant: str, *, expired: bool = False
) -> ExecuteCancelOutcome:
    """Abort the cancel-requested plan ``instant`` and delete its files (module docstring);
    ``expired``: the caller holds heartbeat-monitor's ``HeartbeatExpired`` for the plan
    (positive knowledge of its executor's death, ahead of the liveness view).

    Raises: UnknownPlanError, NotATableServicePlanError, InstantAlreadyCompletedError,
    PlanNotCancellableError, CancelNotRequestedError, PlanStillExecutingError,
    LivenessUnknownError, LockTimeoutError, StorageError (rerun: it resumes)."""
    with ctx.coordinator.lock(ctx.table_id, ttl_s=ctx.lock_ttl_s, wait_s=ctx.lock_wait_s):  # 1.
        current = pending_plan(ctx, ctx.timeline.load(), instant)  # 2.
        if current.state is Transition.ABORTED:  # 3.
            return ExecuteCancelOutcome.ALREADY_ABORTED
        if not current.cancellable:
            raise PlanNotCancellableError(
                f"plan {instant} of table {ctx.table_id} was scheduled without "
                "cancellable=true: it is executed to completion and never aborted.",
                table=ctx.table_id,
                instant=instant,
            )
        if current.state is not Transition.CANCEL_REQUESTED:
            raise CancelNotRequestedError(
                f"plan {instant} of table {ctx.table_id} is {current.state}: its cancellation "
                "was not requested. Help: request_cancel first (irrevocable), then "
                "execute_cancel; nothing was changed.",
                table=ctx.table_id,
                instant=instant,
            )
        require_dead(ctx, instant, what="execute_cancel", expired=expired)  # 4.
    # 5. (the lock is released above)
    return finish_abort(ctx, instant, reason=current.reason or "cancel requested")


def require_dead(
    ctx: ServiceContext, instant: str, *, what: str, expired: bool = False
) -> DeathVerdict:
    """Return when only positive knowledge says the plan's executor is dead
    (``lakewarden.table.death``): its files may then be deleted.

    Raises: PlanStillExecutingError (alive, or a fresh claim), LivenessUnknownError (no
    evidence either way: heartbeat-monitor down or behind)."""
    found = verdict(
        ctx.coordinator,
        ctx.storage,
        ctx.table_id,
        instant,
        now_ms=ctx.wall_ms(),
        plan=True,
        expired=expired,
    )
    if found.dead:
        return found
    if found.alive:
        raise PlanStillExecutingError(
            f"plan {instant} of table {ctx.table_id} is still being executed by "
            f"{found.owner or 'another executor'} ({found.reason}): its files cannot be "
            "deleted yet. The cancel request stands: the executor aborts at its "
            f"pre-commit. Help: retry {what} after its heartbeat stops or expires.",
            table=ctx.table_id,
            instant=instant,
            owner=found.owner,
        )
    raise unknown_error(ctx.table_id, instant, found, what)


def finish_abort(ctx: ServiceContext, instant: str, *, reason: str) -> ExecuteCancelOutcome:
    """Steps 6-10: delete every file of the plan's attempts, then append ``aborted``. The
    caller has made sure nobody else executes the plan (the heartbeat check, or it is the
    executor itself) and the plan has its cancel request.

    Raises: LockTimeoutError, StorageError, IllegalTransitionError, ConcurrentAppendError,
    CommitStateUnknownError (rerun: it resumes)."""
    roll_back_attempts(ctx, instant)  # 6.
    with ctx.coordinator.lock(
        ctx.table_id, ttl_s=ctx.lock_ttl_s, wait_s=ctx.lock_wait_s
    ) as lease:  # 7.
        current = ctx.timeline.load().get(instant)
        if current is not None and current.state is Transition.ABORTED:
            return ExecuteCancelOutcome.ALREADY_ABORTED
        action = current.action if current is not None else None
        assert action is not None

        def draft(_state: TimelineState) -> EntryDraft:
            payload = {"version": 2, "reason": reason[:2000]}
            return ctx.draft(lease, instant, action, Transition.ABORTED, payload)

        try:
            entry, _ = ctx.timeline.append(draft)  # 8.
        except IllegalTransitionError:
            latest = ctx.timeline.load().get(instant)
            if latest is not None and latest.state is Transition.ABORTED:
                return ExecuteCancelOutcome.ALREADY_ABORTED  # another process finished it
            raise
    # 9., 10.: the aborted entry supersedes the cancel request; the lock is released above.
    ctx.coordinator.announce(ctx.table_id, entry)
    return ExecuteCancelOutcome.ABORTED
