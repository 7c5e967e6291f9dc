"""Rolling back failed writes: pending ingestion instants whose executor is dead.

A write whose heartbeat expired (heartbeat-monitor published ``HeartbeatExpired``, the
coordinator's liveness view says dead, or, in-process, the embedded coordinator saw its
heartbeat block end without a completion) never completes by itself. Neither does one whose
writer died between ``requested`` and its first beat: heartbeat-monitor never heard of it, so
it is judged by age instead (``never_beat``). Steps (Hudi's rollback
of failed writes, in log terms; every destructive step comes after an entry that makes the
instant uncommittable):

1. under the table lock append the rollback *intent*: a ``rollback`` instant ``requested``
   with ``RollbackPlan(target)``; the state machine then refuses the target's ``inflight``
   and ``completed`` (a writer that was only slow loses its commit, not its files' safety);
   refused when the target completed meanwhile: then nothing happens;
2. ``abandon`` the target (the one rollback path): ``rolled_back``, then the job's abort
   (every file it placed or staged is deleted, its pending uploads aborted);
3. complete the rollback instant (``lakewarden.table.completion``: a rollback another
   cleaner completed meanwhile is done, not an error).

Resumable at every step: a target with an intent is rolled back by that rollback instant
whatever its liveness, and a pending rollback instant whose target is already rolled back
only needs steps 2 (idempotent) and 3. Files the job did not track (a writer without private
staging puts them at their final keys) are garbage once the target is rolled back; the clean
that follows deletes them (``lakewarden.table.clean.garbage``).
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakewarden.commit import ManifestCommitter
from lakewarden.storage import Storage
from lakewarden.table.abandon import abandon
from lakewarden.table.completion import CompletionOutcome, complete
from lakewarden.table.coordinator import Coordinator, ExecutorLiveness, Liveness
from lakewarden.table.death import Evidence, judge
from lakewarden.table.instant import INGESTION_ACTIONS, Action, Instant, Transition
from lakewarden.table.plans import RollbackPlan
from lakewarden.table.stats import CommitStats
from lakewarden.table.timeline import IllegalTransitionError, Timeline, TimelineState
from lakewarden.table.timeline_state import InstantState
from lakewarden.table.transaction import WriteTransaction

if TYPE_CHECKING:  # the config module imports the clean policy: no cycle at import time
    from lakewarden.table.config import TableConfig

log = logging.getLogger(__name__)

CLEANER_STAGE = "cleaner_rollback"


@dataclass(frozen=True)
class RollbackContext:
    """What a rollback (and a clean) works with: the table's storage, timeline, coordinator,
    identity and config."""

    storage: Storage
    timeline: Timeline
    coordinator: Coordinator
    table_id: str
    actor: str
    # Cancelling expired plans builds the table services' context from it.
    config: TableConfig | None = None


def failed_writes(
    state: TimelineState,
    coordinator: ExecutorLiveness,
    table_id: str,
    dead: Collection[str] = (),
    *,
    now_ms: int | None = None,
) -> list[InstantState]:
    """Pending ingestion instants to roll back: those with a rollback intent (resume: the
    intent already made them uncommittable), and those whose writer is known dead
    (``lakewarden.table.death``: named in ``dead``, a ``HeartbeatExpired``; DEAD in the
    coordinator's view; or, given ``now_ms``, never heard of by the monitor long after its
    request, ``never_beat``). A writer nothing says is dead is left alone."""
    targets = []
    for inst in state.pending():
        if inst.action not in INGESTION_ACTIONS:
            continue
        if inst.rollback_by is not None:
            targets.append(inst)
            continue
        expired = inst.instant in dead
        # Asked even when a HeartbeatExpired names it: a late beat (ALIVE) wins over it.
        liveness = coordinator.liveness(table_id, inst.instant)
        found = judge(
            Evidence(
                instant=inst.instant,
                liveness=liveness,
                judged=None,
                monitored=coordinator.monitors_liveness(),
                now_ms=now_ms or 0,
                expired=expired,
                never_beat=liveness is Liveness.UNKNOWN
                and never_beat(inst, coordinator, table_id, now_ms),
            )
        )
        if found.dead:
            targets.append(inst)
    return targets


# How many heartbeat tolerances after its ``requested`` an instant heartbeat-monitor never heard
# of counts as dead. A writer beats right after ``requested`` lands (its first beat is
# acknowledged before any work), so such an instant lost its writer in between, and no
# ``HeartbeatExpired`` will ever name it (the campaign's ``requested_left_behind``). The margin
# covers clock skew between the writer and the cleaner. The cost of being wrong is bounded: a
# live writer whose beats the monitor never recorded (the monitor down for that long) loses its
# commit to the rollback intent with a named error, never data.
NEVER_BEAT_TOLERANCES = 3


def never_beat(
    inst: InstantState, coordinator: ExecutorLiveness, table_id: str, now_ms: int | None
) -> bool:
    """Whether ``inst`` was requested over ``NEVER_BEAT_TOLERANCES`` heartbeat tolerances
    before ``now_ms`` and the liveness service has no record of it (False without ``now_ms``)."""
    if now_ms is None:
        return False
    bound_ms = NEVER_BEAT_TOLERANCES * coordinator.heartbeat_tolerance_s(table_id) * 1000
    if now_ms - Instant(inst.instant).epoch_ms <= bound_ms:
        return False
    return coordinator.never_heard_of(table_id, inst.instant)


def unfinished_rollbacks(state: TimelineState) -> list[InstantState]:
    """Rollback instants whose target is already rolled back (a crash before step 3)."""
    found = []
    for inst in state.pending():
        if inst.action is Action.ROLLBACK and isinstance(inst.plan, RollbackPlan):
            target = state.get(inst.plan.target)
            if target is not None and not target.is_pending:
                found.append(inst)
    return found


def roll_back(ctx: RollbackContext, target: InstantState, reason: str) -> bool:
    """Roll ``target`` back (steps 1-3); False when it completed before the intent landed.

    Raises: LockTimeoutError, ConcurrentAppendError, CommitStateUnknownError (retry the clean:
    the intent, if it landed, is resumed), StorageError."""
    rollback_instant = target.rollback_by
    if rollback_instant is None:
        try:
            intent = WriteTransaction.begin(  # 1.
                ctx.timeline,
                ctx.coordinator,
                ctx.table_id,
                operation="rollback",
                actor=ctx.actor,
                action=Action.ROLLBACK,
                plan=RollbackPlan(target=target.instant),
            )
        except IllegalTransitionError as err:
            current = ctx.timeline.load().get(target.instant)
            if current is None or current.rollback_by is None:
                log.info("not rolling back %s: %s", target.instant, err.reason)
                return False
            intent_instant = current.rollback_by  # another cleaner's intent: finish it
        else:
            intent_instant = intent.instant
        rollback_instant = intent_instant
    _finish(ctx, target, rollback_instant, reason)
    return True


def finish_rollback(ctx: RollbackContext, rollback: InstantState) -> None:
    """Steps 2 and 3 of a rollback instant whose run was interrupted."""
    assert isinstance(rollback.plan, RollbackPlan)
    target = ctx.timeline.load().get(rollback.plan.target)
    if target is not None:
        _finish(ctx, target, rollback.instant, "resuming an interrupted rollback")


def _finish(ctx: RollbackContext, target: InstantState, rollback_instant: str, why: str) -> None:
    job_id = target.job_plan.job_id if target.job_plan is not None else None
    committer = ManifestCommitter(ctx.storage, job_id) if job_id is not None else None
    txn = WriteTransaction.resume(
        ctx.timeline, ctx.coordinator, ctx.table_id, target.instant, actor=ctx.actor
    )
    cause = f"rolled back by the cleaner ({rollback_instant}): {why}"
    outcome = abandon(committer, txn, cause, stage=CLEANER_STAGE)  # 2.
    if not outcome.rolled_back:
        return
    for failure in outcome.failures:
        log.warning("rollback of %s: %s (the next clean retries)", target.instant, failure)
    rollback = WriteTransaction.resume(
        ctx.timeline, ctx.coordinator, ctx.table_id, rollback_instant, actor=ctx.actor
    )
    current = rollback.status()
    if current is not None and current.state is Transition.REQUESTED:
        stats = CommitStats(operation="rollback", rollback_target=target.instant)
        completion = complete(rollback, stats)  # 3.
        if completion is CompletionOutcome.ALREADY_COMPLETED:
            log.info("rollback %s was completed by another cleaner", rollback_instant)


__all__ = [
    "CLEANER_STAGE",
    "RollbackContext",
    "failed_writes",
    "finish_rollback",
    "roll_back",
    "unfinished_rollbacks",
]
