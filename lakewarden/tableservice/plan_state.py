"""Looking a plan up on the timeline, with the named error for every way it can be wrong."""

from __future__ import annotations

from lakewarden.table.instant import TABLE_SERVICE_ACTIONS, Transition
from lakewarden.table.plans import ServicePlan
from lakewarden.table.timeline_state import InstantState, TimelineState
from lakewarden.tableservice.context import ServiceContext
from lakewarden.tableservice.errors import (
    InstantAlreadyCompletedError,
    NotATableServicePlanError,
    UnknownPlanError,
)

__all__ = ["find_plan", "pending_plan", "service_plan"]


def find_plan(ctx: ServiceContext, state: TimelineState, instant: str) -> InstantState:
    """The table-service instant ``instant`` in any state.

    Raises: UnknownPlanError, NotATableServicePlanError."""
    current = state.get(instant)
    if current is None:
        raise UnknownPlanError(
            f"instant {instant} is not on the timeline of table {ctx.table_id}. Help: pass "
            "the instant schedule_clustering returned (or one from Table.timeline()).",
            table=ctx.table_id,
            instant=instant,
        )
    if current.action not in TABLE_SERVICE_ACTIONS or not isinstance(current.plan, ServicePlan):
        raise NotATableServicePlanError(
            f"instant {instant} of table {ctx.table_id} is a {current.action}, not a "
            "clustering or compaction plan; nothing was changed.",
            table=ctx.table_id,
            instant=instant,
        )
    return current


def pending_plan(ctx: ServiceContext, state: TimelineState, instant: str) -> InstantState:
    """The plan, which must not be completed (aborted ones are returned: callers finish them).

    Raises: UnknownPlanError, NotATableServicePlanError, InstantAlreadyCompletedError."""
    current = find_plan(ctx, state, instant)
    if current.state is Transition.COMPLETED:
        raise InstantAlreadyCompletedError(
            f"plan {instant} of table {ctx.table_id} is completed already (seq "
            f"{current.completed_seq}); there is nothing to execute or cancel.",
            table=ctx.table_id,
            instant=instant,
        )
    return current


def service_plan(current: InstantState) -> ServicePlan:
    """The typed plan of a table-service instant (``find_plan`` checked it)."""
    plan = current.plan
    assert isinstance(plan, ServicePlan)
    return plan
