"""The pre-commit decision of an executor: ``completed``, or cleanup and ``aborted``.

Under the table lock, against the reloaded timeline (re-run on every rebase):

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
   the old slices leave the snapshot). The state machine re-checks 1-3.

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
from lakewarden.table.transaction import entry_payload
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
    def __init__(self, reason: str, *, request: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.request = request


def complete_or_cancel(ctx: ServiceContext, instant: str, stats: CommitStats) -> Verdict:
    """Steps 1-6 of the module docstring.

    Raises: AttemptFencedError, WriteConflictError subclasses (non-cancellable plan),
    HeartbeatLostError,
    ExecutorOutputLostError, IllegalTransitionError, LockTimeoutError, ConcurrentAppendError,
    CommitStateUnknownError."""
    announced: list[TimelineEntry] = []
    payload = entry_payload(stats)
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
                if abort.request:  # 3.: the plan cancels itself, still under the lock
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


def _checks(
    ctx: ServiceContext, instant: str, stats: CommitStats
) -> Callable[[TimelineState, EntryDraft], None]:
    def checks(state: TimelineState, _draft: EntryDraft) -> None:
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
            raise _MustAbort(current.reason or "cancel requested", request=False)
        finding = conflicts.find_conflict(state, current, stats)  # 3.
        if finding is not None:
            if current.cancellable:
                raise _MustAbort(finding.describe(), request=True)
            raise finding.error(ctx.table_id)
        ctx.coordinator.check_heartbeat(ctx.table_id, instant)  # 4.
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
