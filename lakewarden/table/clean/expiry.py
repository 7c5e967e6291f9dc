"""Expiry of cancellable plans (RFC-79 goal C): clean cancels what nobody will finish.

A compaction or clustering scheduled ``cancellable`` with a ``cancellation_policy`` that has
outlived it (``max_age_s`` since it was scheduled, or ``max_completed_instants`` writes
completed since) and whose executor has no live heartbeat is cancelled by the clean exactly
as RFC-79 says clean must: ``request_cancel`` (irrevocable: the plan can never complete), then
``execute_cancel`` (the heartbeat is checked again under the lock; its files are deleted, the
plan kept, ``aborted`` appended). A plan whose cancellation someone else requested and whose
executor is gone is aborted the same way, whatever its policy: its partial files must not stay
forever. A live executor is never interrupted: ``execute_cancel`` refuses, and the next clean
tries again (the cancel request stands; the executor aborts at its own pre-commit).

Once a plan is aborted its file groups are no longer protected, so the clean that follows
frees what the plan had pinned.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from lakewarden.errors import LakewardenError
from lakewarden.table.clean.retention import data_writes
from lakewarden.table.clean.rollback import RollbackContext
from lakewarden.table.coordinator import Coordinator, Liveness
from lakewarden.table.instant import Instant, Transition
from lakewarden.table.plans import CancellationPolicy, ServicePlan
from lakewarden.table.timeline_state import InstantState, TimelineState

log = logging.getLogger(__name__)


def expired_plans(
    state: TimelineState, coordinator: Coordinator, table_id: str, *, now_ms: int
) -> Iterator[tuple[InstantState, str]]:
    """The pending cancellable plans to cancel now, with why; none whose executor is alive."""
    for plan in state.pending_plans():
        if not plan.cancellable:
            continue
        if plan.state is Transition.CANCEL_REQUESTED:
            why: str | None = plan.reason or "its cancellation was requested"
        elif isinstance(plan.plan, ServicePlan) and plan.plan.cancellation_policy is not None:
            why = _past_policy(plan.plan.cancellation_policy, plan, state, now_ms)
        else:
            why = None
        if why is None:
            continue
        if coordinator.liveness(table_id, plan.instant) is Liveness.ALIVE:
            log.info("plan %s is due for cancellation but its executor is alive", plan.instant)
            continue
        yield plan, why


def _past_policy(
    policy: CancellationPolicy, plan: InstantState, state: TimelineState, now_ms: int
) -> str | None:
    if policy.max_age_s is not None:
        age_s = (now_ms - Instant(plan.instant).epoch_ms) / 1000
        if age_s > policy.max_age_s:
            return (
                f"scheduled {age_s:.0f} s ago, past its cancellation policy "
                f"(max_age_s={policy.max_age_s:g})"
            )
    if policy.max_completed_instants is not None:
        since = sum(1 for w in data_writes(state) if (w.completed_seq or 0) > plan.requested_seq)
        if since >= policy.max_completed_instants:
            return (
                f"{since} writes completed since it was scheduled, past its cancellation "
                f"policy (max_completed_instants={policy.max_completed_instants})"
            )
    return None


def cancel_plan(ctx: RollbackContext, plan: InstantState, why: str) -> bool:
    """``request_cancel`` (unless requested already), then ``execute_cancel``; False when the
    executor turned out alive (the request stands; the next clean tries again).

    Raises: LockTimeoutError, StorageError, and the cancel APIs' errors other than a live
    executor (the clean stops; its next run resumes: both steps are idempotent)."""
    # Imported here: the table services import the table layer, which imports the clean.
    from lakewarden.table.cancel import request_cancel
    from lakewarden.tableservice import ServiceContext, execute_cancel
    from lakewarden.tableservice.errors import PlanStillExecutingError

    if ctx.config is None:
        raise LakewardenError(f"cancelling plan {plan.instant} needs the table's config")
    if plan.state is not Transition.CANCEL_REQUESTED:
        request_cancel(
            ctx.timeline,
            ctx.coordinator,
            ctx.table_id,
            plan.instant,
            requested_by=ctx.actor,
            reason=f"clean: {why}",
            actor=ctx.actor,
        )
    service = ServiceContext(ctx.storage, ctx.config, ctx.timeline, ctx.coordinator, ctx.actor)
    try:
        execute_cancel(service, plan.instant)
    except PlanStillExecutingError as err:
        log.info("plan %s: %s", plan.instant, err)
        return False
    return True


__all__ = ["cancel_plan", "expired_plans"]
