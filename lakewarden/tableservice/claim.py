"""The claim: at most one executor per plan (invariant 4).

Under the table lock an executor reloads the timeline, asks the coordinator whether the plan's
heartbeat is alive, and, when it is not, starts beating for the plan before it releases the
lock: a second executor claiming after it sees the heartbeat and refuses with
``PlanAlreadyExecutingError`` naming the owner.

The claim window. With Kafka the first beat is acknowledged by the broker before the lock is
released, but the liveness view is heartbeat-monitor's changelog, which has that beat only once
the monitor processed it: right after a claim the view can still say UNKNOWN (no record yet),
or DEAD (the record of an earlier executor that died). A second executor claiming in that
moment would run the plan too (only one could commit; the other's work is wasted). So the claim
also leaves a mark in storage, written under the lock: ``.lakewarden/claims/<instant>.json``
naming the executor, when it claimed, and its heartbeat tolerance. A later claimer that does
not see a live heartbeat still refuses while another executor's mark is younger than that
tolerance and the monitor has not judged that executor yet (its record names someone else,
or nobody). Once the monitor's record names the marked executor, its verdict decides: a
killed executor is declared dead a tolerance after its last beat, never earlier than its mark
expires. The executor removes its mark when it stops (a crash leaves it, to expire), so a retry
after a failure is not held up. The mark's age is judged by the reader's wall clock against the
claimer's: clocks apart by more than a fraction of the tolerance shorten or lengthen the window
(safety never depends on it, see below). Without Kafka (the embedded coordinator, which sees
no other process's heartbeats) the mark is the only sign of another process's executor: a
killed one's plan can be claimed again once its mark is a tolerance old (30 s by default).

Heartbeats and marks are a liveness signal, not a proof: a paused executor can be judged dead
while it still runs. Safety does not rest on them: a retried attempt first appends its own
``inflight``, which fences every earlier attempt (the state machine refuses their
``completed``), and only then deletes their files (``rollback``); an executor completes only
if every file it wrote is still there (``precommit``), and only one ``completed`` is ever legal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

from lakewarden.storage import StorageError
from lakewarden.table.claim_mark import CLAIMS_PREFIX, ClaimMark, claim_key, read_claim_mark
from lakewarden.table.death import Evidence, judge, unknown_error
from lakewarden.table.timeline_state import InstantState
from lakewarden.tableservice.context import ServiceContext
from lakewarden.tableservice.errors import PlanAlreadyExecutingError
from lakewarden.tableservice.plan_state import pending_plan

__all__ = ["CLAIMS_PREFIX", "ClaimMark", "claim", "claim_key", "read_claim"]

log = logging.getLogger(__name__)


def read_claim(ctx: ServiceContext, instant: str) -> ClaimMark | None:
    """The plan's claim mark (``lakewarden.table.claim_mark``); None when there is none.

    Raises: StorageError (other than a missing mark)."""
    return read_claim_mark(ctx.storage, instant)


@contextmanager
def claim(
    ctx: ServiceContext, instant: str, *, wall_ms: Callable[[], int] | None = None
) -> Iterator[InstantState]:
    """Hold the plan's heartbeat (and claim mark) for the ``with`` block; yields the plan as
    loaded under the lock. ``wall_ms`` (default: the context's) dates the mark.

    Raises: PlanAlreadyExecutingError, InstantAlreadyCompletedError, UnknownPlanError,
    NotATableServicePlanError, LockTimeoutError, HeartbeatLostError (first beat not
    delivered), StorageError (the mark could not be read or written)."""
    wall_ms = wall_ms or ctx.wall_ms
    with ExitStack() as beating:
        with ctx.coordinator.lock(ctx.table_id, ttl_s=ctx.lock_ttl_s, wait_s=ctx.lock_wait_s):
            plan = pending_plan(ctx, ctx.timeline.load(), instant)
            _refuse_if_executing(ctx, instant, wall_ms())
            tolerance_ms = round(ctx.coordinator.heartbeat_tolerance_s(ctx.table_id) * 1000)
            mark = ClaimMark(ctx.actor, wall_ms(), tolerance_ms)
            ctx.storage.write(claim_key(instant), mark.encode())
            try:
                beating.enter_context(ctx.coordinator.heartbeat(ctx.table_id, instant, ctx.actor))
            except BaseException:
                _release_mark(ctx, instant, mark)
                raise
            # Runs before the heartbeat ends: nobody can claim while the mark goes away.
            beating.callback(_release_mark, ctx, instant, mark)
        yield plan


def _refuse_if_executing(ctx: ServiceContext, instant: str, now_ms: int) -> None:
    """Claim only where an earlier executor is known dead or never was
    (``lakewarden.table.death``: the next attempt fences it and deletes its files).

    Raises: PlanAlreadyExecutingError (a live heartbeat, or a fresh claim of another executor
    the monitor has not judged yet), LivenessUnknownError (another executor's expired claim,
    and heartbeat-monitor has no verdict on it)."""
    mark = read_claim(ctx, instant)
    if mark is not None and mark.owner == ctx.actor:
        mark = None  # this executor's own mark, left by an earlier run: no other claimer
    found = judge(
        Evidence(
            instant=instant,
            liveness=ctx.coordinator.liveness(ctx.table_id, instant),
            judged=ctx.coordinator.executor_of(ctx.table_id, instant),
            monitored=ctx.coordinator.monitors_liveness(),
            now_ms=now_ms,
            plan=True,
            mark=mark,
        )
    )
    if found.dead:
        return
    if found.alive:
        raise _executing(ctx, instant, found.owner, found.reason)
    raise unknown_error(ctx.table_id, instant, found, "claiming the plan")


def _executing(
    ctx: ServiceContext, instant: str, owner: str | None, why: str
) -> PlanAlreadyExecutingError:
    return PlanAlreadyExecutingError(
        f"plan {instant} of table {ctx.table_id} is being executed by "
        f"{owner or 'another executor'} ({why}). Help: at most one executor runs a plan; "
        "retry after that one stops, or let it finish.",
        table=ctx.table_id,
        instant=instant,
        owner=owner,
    )


def _release_mark(ctx: ServiceContext, instant: str, mine: ClaimMark) -> None:
    """Remove this executor's mark (best effort: a mark left behind only expires). Another
    executor's mark is left alone (it claimed after this one was judged dead)."""
    try:
        if read_claim(ctx, instant) == mine:
            ctx.storage.delete(claim_key(instant))
    except StorageError as err:
        log.warning("plan %s: the claim mark was not removed (it expires): %s", instant, err)
