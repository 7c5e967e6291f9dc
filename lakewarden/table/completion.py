"""The one completion protocol: how every action ends an instant ``completed``.

Every action that completes an instant (ingestion and the error table through
``job_commit.commit_instant``, compaction and clustering through
``lakewarden.tableservice``, clean, rollback) follows the same numbered steps; this module is
the part they share, steps 3 and 4:

1. **fence**: an entry the state machine judges makes whatever the destructive step affects
   uncommittable, or names exactly what may be deleted: a clean's ``requested`` plan (the
   files it lists are garbage by the retention rules), a rollback intent (its target can
   never complete), an ingestion's ``rolled_back`` (``abandon``), a plan's
   ``cancel_requested``, a retried plan attempt's ``inflight`` (the earlier attempts are
   fenced);
2. **destructive step**, only after that entry exists (deleting files, aborting jobs); its
   license to delete a pending instant's files is ``lakewarden.table.death``'s rule;
3. **complete**: ``completed`` appended under the table lock, validated against the log it
   lands on (conflict rules, the heartbeat, the caller's rules), re-validated after every
   rebase (``complete``);
4. **unknown outcome, or a racing actor**: the log decides, never a blind retry
   (``reconcile``): completed with this actor's payload -> done; completed by another actor
   doing the same work (a second cleaner finishing the clean, a rerun of the rollback) ->
   ``ALREADY_COMPLETED``, reported as success by the caller, as ``finish_abort`` reports an
   abort finished by another process; anything else -> the error stands.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum

from lakewarden.errors import CommitStateUnknownError
from lakewarden.table.instant import Transition
from lakewarden.table.stats import CommitStats
from lakewarden.table.timeline import (
    IllegalTransitionError,
    Timeline,
    TimelineEntry,
    TimelineState,
)
from lakewarden.table.transaction import WriteTransaction, entry_payload

__all__ = ["CompletionOutcome", "complete", "reconcile"]

Mine = Callable[[TimelineEntry], bool]


class CompletionOutcome(StrEnum):
    COMPLETED = "completed"  # this actor's completed is on the log
    ALREADY_COMPLETED = "already_completed"  # another actor completed the same work


def reconcile(timeline: Timeline, instant: str, mine: Mine) -> CompletionOutcome | None:
    """Step 4: read the log. None when the instant is not completed (the caller's error
    stands); else whether its ``completed`` entry is this actor's (``mine(entry)``) or
    another's."""
    current = timeline.load().get(instant)
    if current is None or current.state is not Transition.COMPLETED:
        return None
    seq = current.completed_seq
    entry = next(iter(timeline.entries(after_seq=seq - 1)), None) if seq is not None else None
    if entry is not None and entry.seq == seq and mine(entry):
        return CompletionOutcome.COMPLETED
    return CompletionOutcome.ALREADY_COMPLETED


def complete(
    txn: WriteTransaction,
    stats: CommitStats,
    *,
    validate: Callable[[TimelineState], None] | None = None,
    same_work: bool = True,
) -> CompletionOutcome:
    """Steps 3 and 4 for ``txn``'s instant. The ``completed`` entry is this actor's when it
    names this actor and these statistics. ``same_work``: another actor's completion of the
    instant is this actor's work done (a clean or a rollback: the plan is on the log); False
    where it would be someone else's write, and then the error stands.

    Raises: what ``WriteTransaction.complete`` raises, unless the log shows the instant
    completed (by this actor; or, with ``same_work``, by another)."""
    payload = entry_payload(stats)

    def mine(entry: TimelineEntry) -> bool:
        return entry.actor == txn.actor and entry.payload == payload

    try:
        txn.complete(stats, validate=validate)  # 3.
    except (CommitStateUnknownError, IllegalTransitionError):
        outcome = reconcile(txn.timeline, txn.instant, mine)  # 4.
        if outcome is CompletionOutcome.COMPLETED:
            return outcome
        if outcome is CompletionOutcome.ALREADY_COMPLETED and same_work:
            return outcome
        raise
    return CompletionOutcome.COMPLETED
