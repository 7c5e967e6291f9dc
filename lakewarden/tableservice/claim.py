"""The claim: at most one executor per plan (invariant 4).

Under the table lock an executor reloads the timeline, asks the coordinator whether the plan's
heartbeat is alive, and, when it is not, starts beating for the plan before it releases the
lock: a second executor claiming after it sees the heartbeat (with Kafka, the first beat has
been acknowledged by the broker before the lock is released) and refuses with
``PlanAlreadyExecutingError`` naming the owner.

Heartbeats are a liveness signal, not a proof: a paused executor can be declared dead while it
still runs. Safety does not rest on them: the rollback of an earlier attempt deletes files only
under the lock and only while the plan is not completed, and an executor completes only if
every file it wrote is still there (``precommit``), so a zombie never commits over a newer
attempt's rollback, and only one ``completed`` is ever legal (the state machine).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from lakewarden.table.coordinator import Liveness
from lakewarden.table.timeline_state import InstantState
from lakewarden.tableservice.context import ServiceContext
from lakewarden.tableservice.errors import PlanAlreadyExecutingError
from lakewarden.tableservice.plan_state import pending_plan

__all__ = ["claim"]


@contextmanager
def claim(ctx: ServiceContext, instant: str) -> Iterator[InstantState]:
    """Hold the plan's heartbeat for the ``with`` block; yields the plan as loaded under the
    lock.

    Raises: PlanAlreadyExecutingError, InstantAlreadyCompletedError, UnknownPlanError,
    NotATableServicePlanError, LockTimeoutError, HeartbeatLostError (first beat not
    delivered)."""
    with ExitStack() as beating:
        with ctx.coordinator.lock(ctx.table_id, ttl_s=ctx.lock_ttl_s, wait_s=ctx.lock_wait_s):
            plan = pending_plan(ctx, ctx.timeline.load(), instant)
            if ctx.coordinator.liveness(ctx.table_id, instant) is Liveness.ALIVE:
                owner = ctx.coordinator.executor_of(ctx.table_id, instant)
                raise PlanAlreadyExecutingError(
                    f"plan {instant} of table {ctx.table_id} is being executed by "
                    f"{owner or 'another executor'} (its heartbeat is alive). Help: at most "
                    "one executor runs a plan; retry after that one stops, or let it finish.",
                    table=ctx.table_id,
                    instant=instant,
                    owner=owner,
                )
            beating.enter_context(ctx.coordinator.heartbeat(ctx.table_id, instant, ctx.actor))
        yield plan
