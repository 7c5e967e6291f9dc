"""The pre-commit decision of an executor: ``completed``, or cleanup and ``aborted``.

Steps 3 and 4 of the one completion protocol (``lakewarden.table.completion``) for a plan
attempt whose fence (its ``inflight``) and rewrite are done. ``completed`` is appended by
``WriteTransaction.complete``, the one code path that appends it for every action, under the
table lock, against the reloaded timeline (its checks re-run on every rebase):

1. the plan has a cancel request: abort (RFC-79: a cancelled plan never completes);
2. a newer attempt's ``inflight`` fenced this one (``AttemptFencedError``: nothing is
   completed, the newer attempt may be deleting these files);
3. a conflict rule finds an instant that completed meanwhile on the plan's file groups:
   a cancellable plan requests its own cancellation (reason: the conflict), then aborts
   (ingestion took precedence); a non-cancellable plan raises the named conflict (it cannot
   complete, nor abort: see ``WriteConflictError``'s Help);
4. this executor's heartbeat was lost: ``HeartbeatLostError`` (it may have been declared dead
   and rolled back);
5. a file the statistics name is gone (another executor rolled this attempt back):
   ``ExecutorOutputLostError``;
6. otherwise append ``completed`` with the statistics, which name this attempt (a replace:
   the old slices leave the snapshot). The state machine re-checks 1-3; an unknown outcome
   is settled by reading the log (this attempt's ``completed`` there is success).

The abort itself (delete the files, then ``aborted``) happens after the lock is released, in
``lakewarden.tableservice.cancel.finish_abort``: the one place a plan's files are rolled back
and its ``aborted`` appended, whether an executor, ``execute_cancel`` or the cleaner aborts it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lakewarden.table import conflicts
from lakewarden.table.cancel import request_cancel
from lakewarden.table.completion import complete
from lakewarden.table.conflicts import WriteConflictError
from lakewarden.table.instant import Transition
from lakewarden.table.stats import CommitStats
from lakewarden.table.timeline_state import TimelineState
from lakewarden.table.transaction import WriteTransaction
from lakewarden.tableservice.context import ServiceContext
from lakewarden.tableservice.errors import AttemptFencedError, ExecutorOutputLostError

__all__ = ["Verdict", "complete_or_cancel"]


@dataclass(frozen=True)
class Verdict:
    """``completed`` is True when the plan completed; otherwise ``reason`` says why it must
    be aborted (its cancel request is on the log)."""

    completed: bool
    reason: str = ""


class _MustAbort(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def complete_or_cancel(ctx: ServiceContext, instant: str, stats: CommitStats) -> Verdict:
    """Steps 1-6 of the module docstring.

    Raises: AttemptFencedError, WriteConflictError subclasses (non-cancellable plan),
    HeartbeatLostError, ExecutorOutputLostError, IllegalTransitionError, LockTimeoutError,
    ConcurrentAppendError, CommitStateUnknownError."""
    txn = WriteTransaction.resume(
        ctx.timeline,
        ctx.coordinator,
        ctx.table_id,
        instant,
        actor=ctx.actor,
        lock_ttl_s=ctx.lock_ttl_s,
        lock_wait_s=ctx.lock_wait_s,
    )
    try:
        try:
            complete(txn, stats, validate=_checks(ctx, instant, stats), same_work=False)  # 6.
        except WriteConflictError as conflict:  # 3.
            state = ctx.timeline.load()
            current = state.get(instant)
            if current is None or not current.is_pending:
                raise
            _checks(ctx, instant, stats)(state)  # a fence or a cancel request decides first
            if not current.cancellable:
                raise
            finding = conflicts.find_conflict(state, current, stats)
            reason = finding.describe() if finding is not None else str(conflict)
            request_cancel(  # the plan cancels itself: ingestion took precedence
                ctx.timeline,
                ctx.coordinator,
                ctx.table_id,
                instant,
                requested_by=ctx.actor,
                reason=reason,
                actor=ctx.actor,
                lock_ttl_s=ctx.lock_ttl_s,
                lock_wait_s=ctx.lock_wait_s,
            )
            return Verdict(completed=False, reason=reason)
    except _MustAbort as abort:  # 1.
        return Verdict(completed=False, reason=abort.reason)
    return Verdict(completed=True)


def _checks(
    ctx: ServiceContext, instant: str, stats: CommitStats
) -> Callable[[TimelineState], None]:
    """Steps 1, 2 and 5 (``WriteTransaction.complete`` runs 4 and 3 before them; a conflict
    of a cancellable plan is turned into its abort by the caller)."""

    def checks(state: TimelineState) -> None:
        current = state.get(instant)
        fenced_by = current.attempt if current is not None else None
        if fenced_by is not None and fenced_by != stats.attempt:  # 2. (also once completed)
            raise AttemptFencedError(
                f"plan {instant} of table {ctx.table_id}: attempt {stats.attempt} was fenced "
                f"by attempt {fenced_by} (a retry's inflight); nothing was completed. Help: "
                "let that attempt finish the plan; this one's files are deleted.",
                table=ctx.table_id,
                instant=instant,
                attempt=stats.attempt or 0,
                fenced_by=fenced_by,
            )
        if current is None or not current.is_pending:
            return  # the state machine names what is wrong (terminal, unknown)
        if current.state is Transition.CANCEL_REQUESTED:  # 1.
            raise _MustAbort(current.reason or "cancel requested")
        missing = [s.path for s in stats.write_stats if not ctx.storage.exists(s.path)]  # 5.
        if missing:
            raise ExecutorOutputLostError(
                f"plan {instant} of table {ctx.table_id}: {len(missing)} file(s) this executor "
                f"wrote are gone (first: {missing[0]}); another executor rolled this attempt "
                "back. Nothing was completed. Help: let the other executor finish the plan.",
                table=ctx.table_id,
                instant=instant,
            )

    return checks
