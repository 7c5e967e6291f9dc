"""The pre-commit decision of an executor: ``completed``, or cleanup and ``aborted``.

Under the table lock, against the reloaded timeline (re-run on every rebase):

1. the plan has a cancel request: abort (RFC-79: a cancelled plan never completes);
2. a conflict rule finds an instant that completed meanwhile on the plan's file groups:
   a cancellable plan requests its own cancellation (reason: the conflict), then aborts
   (ingestion took precedence); a non-cancellable plan raises the named conflict (it cannot
   complete, nor abort: see ``WriteConflictError``'s Help);
3. this executor's heartbeat was lost: ``HeartbeatLostError`` (it may have been declared dead
   and rolled back);
4. a file the statistics name is gone (another executor rolled this attempt back):
   ``ExecutorOutputLostError``;
5. otherwise append ``completed`` with the statistics (a replace: the old slices leave the
   snapshot). The state machine re-checks 1 and 2.

The abort itself (delete the files, then ``aborted``) happens after the lock is released, in
``lakewarden.tableservice.cancel.finish_abort``: the one place a plan's files are rolled back
and its ``aborted`` appended, whether an executor, ``execute_cancel`` or the cleaner aborts it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lakewarden.table import conflicts
from lakewarden.table.cancel import cancel_reason
from lakewarden.table.instant import Transition
from lakewarden.table.stats import CommitStats
from lakewarden.table.timeline_state import EntryDraft, TimelineEntry, TimelineState
from lakewarden.tableservice.context import ServiceContext
from lakewarden.tableservice.errors import ExecutorOutputLostError

__all__ = ["Verdict", "complete_or_cancel"]


@dataclass(frozen=True)
class Verdict:
    """``completed`` is True when the plan completed; otherwise ``reason`` says why it must
    be aborted (its cancel request is on the log)."""

    completed: bool
    reason: str = ""


class _MustAbort(Exception):
    def __init__(self, reason: str, *, request: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.request = request


def complete_or_cancel(ctx: ServiceContext, instant: str, stats: CommitStats) -> Verdict:
    """Steps 1-5 of the module docstring.

    Raises: WriteConflictError subclasses (non-cancellable plan), HeartbeatLostError,
    ExecutorOutputLostError, IllegalTransitionError, LockTimeoutError, ConcurrentAppendError,
    CommitStateUnknownError."""
    announced: list[TimelineEntry] = []
    payload = stats.model_dump(mode="json")
    try:
        with ctx.coordinator.lock(
            ctx.table_id, ttl_s=ctx.lock_ttl_s, wait_s=ctx.lock_wait_s
        ) as lease:
            current = ctx.timeline.load().get(instant)
            assert current is not None
            action = current.action
            try:

                def draft(_state: TimelineState) -> EntryDraft:
                    return ctx.draft(lease, instant, action, Transition.COMPLETED, payload)

                entry, _ = ctx.timeline.append(draft, validate=_checks(ctx, instant, stats))
                announced.append(entry)
                return Verdict(completed=True)
            except _MustAbort as abort:
                if abort.request:  # 2.: the plan cancels itself, still under the lock
                    reason = cancel_reason(ctx.actor, abort.reason)
                    request = ctx.draft(
                        lease,
                        instant,
                        action,
                        Transition.CANCEL_REQUESTED,
                        {"version": 2, "reason": reason},
                    )
                    entry, _ = ctx.timeline.append(request)
                    announced.append(entry)
                return Verdict(completed=False, reason=abort.reason)
    finally:
        for entry in announced:
            ctx.coordinator.announce(ctx.table_id, entry)
            ctx.timeline.appended(entry)  # the Delta publisher, when publishing is on


def _checks(
    ctx: ServiceContext, instant: str, stats: CommitStats
) -> Callable[[TimelineState, EntryDraft], None]:
    def checks(state: TimelineState, _draft: EntryDraft) -> None:
        current = state.get(instant)
        if current is None or not current.is_pending:
            return  # the state machine names what is wrong (terminal, unknown)
        if current.state is Transition.CANCEL_REQUESTED:  # 1.
            raise _MustAbort(current.reason or "cancel requested", request=False)
        finding = conflicts.find_conflict(state, current, stats)  # 2.
        if finding is not None:
            if current.cancellable:
                raise _MustAbort(finding.describe(), request=True)
            raise finding.error(ctx.table_id)
        ctx.coordinator.check_heartbeat(ctx.table_id, instant)  # 3.
        missing = [s.path for s in stats.write_stats if not ctx.storage.exists(s.path)]  # 4.
        if missing:
            raise ExecutorOutputLostError(
                f"plan {instant} of table {ctx.table_id}: {len(missing)} file(s) this executor "
                f"wrote are gone (first: {missing[0]}); another executor rolled this attempt "
                "back. Nothing was completed. Help: let the other executor finish the plan.",
                table=ctx.table_id,
                instant=instant,
            )

    return checks
