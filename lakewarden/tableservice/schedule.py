"""Scheduling a table-service plan: the ``requested`` entry of a compaction or clustering.

Protocol of ``schedule``:

1. take the table lock;
2. load the timeline; the snapshot is the latest one (its ``as_of`` becomes the plan's
   ``last_completed_instant``, as RFC-79's reviewer asked); the file groups of pending plans
   are busy (two overlapping plans cannot both complete);
3. ask the strategy for a plan; none: nothing is appended, return None;
4. append ``requested`` {operation = the strategy's name, ``cancellable``, the plan with its
   ``cancellation_policy``}; on a rebase steps 2-3 run again, so the plan always names the
   slices of the snapshot just before its entry;
5. release the lock; announce the entry.
"""

from __future__ import annotations

from lakewarden.table.instant import Instant, Transition
from lakewarden.table.plans import CancellationPolicy
from lakewarden.table.snapshot import build_snapshot
from lakewarden.table.timeline_state import EntryDraft, TimelineState
from lakewarden.table.transaction import requested_payload
from lakewarden.tableservice.context import ServiceContext
from lakewarden.tableservice.errors import InvalidPlanOptionsError
from lakewarden.tableservice.strategy import PlanningInput, TableServiceStrategy

__all__ = ["schedule"]


class _NothingToDo(Exception):
    """The strategy found nothing worth rewriting (stops the append)."""


def schedule(
    ctx: ServiceContext,
    strategy: TableServiceStrategy,
    *,
    cancellable: bool = False,
    cancellation_policy: CancellationPolicy | None = None,
) -> Instant | None:
    """Append a plan of ``strategy`` (steps in the module docstring); None: nothing to do.

    Raises: InvalidPlanOptionsError, LockTimeoutError, ConcurrentAppendError,
    CommitStateUnknownError."""
    if cancellation_policy is not None and not cancellable:
        raise InvalidPlanOptionsError(
            f"a cancellation policy ({cancellation_policy.model_dump(exclude_none=True)}) is "
            "only honoured for cancellable plans. Help: pass cancellable=True, or no policy.",
            table=ctx.table_id,
        )
    ctx.coordinator.before_requested(ctx.table_id, ctx.actor)
    with ctx.coordinator.lock(
        ctx.table_id, ttl_s=ctx.lock_ttl_s, wait_s=ctx.lock_wait_s
    ) as lease:  # 1.

        def draft(state: TimelineState) -> EntryDraft:
            snapshot = build_snapshot(state.completed())  # 2.
            busy = frozenset(g for p in state.pending_plans() for g in p.plan_file_groups)
            plan = strategy.plan(PlanningInput(ctx.config, snapshot, busy))  # 3.
            if plan is None:
                raise _NothingToDo()
            plan = plan.model_copy(
                update={
                    "strategy": strategy.name,
                    "cancellation_policy": cancellation_policy,
                    "last_completed_instant": snapshot.as_of,
                }
            )
            instant = Instant.next_after(state.last_requested())
            payload = requested_payload(strategy.name, plan, cancellable=cancellable)
            return ctx.draft(lease, str(instant), strategy.action, Transition.REQUESTED, payload)

        try:
            entry, _ = ctx.timeline.append(draft)  # 4.
        except _NothingToDo:
            return None
    ctx.coordinator.announce(ctx.table_id, entry)  # 5.
    return Instant(entry.instant)
