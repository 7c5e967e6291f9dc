"""Expiry of cancellable plans (RFC-79 goal C): clean cancels what nobody will finish.

A compaction or clustering scheduled ``cancellable`` with a ``cancellation_policy`` that has
outlived it (``max_age_s`` since it was scheduled, or ``max_completed_instants`` writes
completed since) and whose executor is known dead or absent is cancelled by the clean as
RFC-79 says clean must: ``request_cancel`` (irrevocable: the plan can never complete), then
``execute_cancel`` (the executor is judged again under the lock; its files are deleted, the
plan kept, ``aborted`` appended). A plan whose cancellation someone else requested and whose
executor is gone is aborted the same way, whatever its policy: its partial files must not stay
forever. Only positive knowledge of the executor's death licenses it
(``lakewarden.table.death``): a live executor, a fresh claim not judged yet, and an executor
nobody has a verdict on (heartbeat-monitor down) are never interrupted; the next clean tries
again (a cancel request already made stands; the executor aborts at its own pre-commit).

Once a plan is aborted its file groups are no longer protected, so the clean that follows
frees what the plan had pinned.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator
from dataclasses import replace

from lakewarden.errors import LakewardenError
from lakewarden.table.clean.retention import data_writes
from lakewarden.table.clean.rollback import RollbackContext
from lakewarden.table.death import LivenessUnknownError, verdict
from lakewarden.table.instant import Instant, Transition
from lakewarden.table.plans import CancellationPolicy, ServicePlan
from lakewarden.table.timeline_state import InstantState, TimelineState

log = logging.getLogger(__name__)


def expired_plans(
    ctx: RollbackContext,
    state: TimelineState,
    *,
    now_ms: int,
    dead: Collection[str] = (),
) -> Iterator[tuple[InstantState, str]]:
    """The pending cancellable plans to cancel now, with why: only those whose executor is
    known dead or absent (``lakewarden.table.death``; ``dead``: instants named by a
    ``HeartbeatExpired``). Any other is left for the next clean, with a log line saying why."""
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
        found = verdict(
            ctx.coordinator,
            ctx.storage,
            ctx.table_id,
            plan.instant,
            now_ms=now_ms,
            plan=True,
            expired=plan.instant in dead,
        )
        if not found.dead:
            log.info(
                "plan %s is due for cancellation (%s) but is left alone: %s",
                plan.instant,
                why,
                found.reason,
                extra={"table": ctx.table_id, "instant": plan.instant},
            )
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


def cancel_plan(
    ctx: RollbackContext, plan: InstantState, why: str, *, wall_ms: Callable[[], int] | None = None
) -> bool:
    """``request_cancel`` (unless requested already), then ``execute_cancel``; False when the
    executor turned out alive, or nothing says it is dead any more (``execute_cancel`` judges
    again under the lock; the request stands; the next clean tries again).

    Raises: LockTimeoutError, StorageError, and the cancel APIs' errors other than a live
    executor (the clean stops; its next run resumes: both steps are idempotent)."""
    # Imported here, when a plan is cancelled: a clean that cancels nothing (most) does not
    # pay for loading the table services.
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
    if wall_ms is not None:  # the clean's clock dates claim marks too
        service = replace(service, wall_ms=wall_ms)
    try:
        execute_cancel(service, plan.instant)
    except (PlanStillExecutingError, LivenessUnknownError) as err:
        log.info("plan %s: %s", plan.instant, err)
        return False
    return True


__all__ = ["cancel_plan", "expired_plans"]
