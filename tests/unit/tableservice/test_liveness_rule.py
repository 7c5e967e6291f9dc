"""Only positive knowledge of death licenses deleting a pending plan's files
(``lakewarden.table.death``): the rule's table, and the cancel that used to guess.

Executor A runs a plan in another process (its own coordinator: this one sees no heartbeat
of it, liveness UNKNOWN) with a fresh claim mark. ``request_cancel`` + ``execute_cancel`` by B
used to count UNKNOWN as dead: the plan ended ``aborted`` and A's files were deleted under it.
Now ``execute_cancel`` refuses (``PlanStillExecutingError`` naming A) and A, at its pre-commit,
finds the request and aborts itself. With a monitor that has no verdict (heartbeat-monitor
down), an expired claim is not enough either: ``LivenessUnknownError`` says why.
"""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest
from conftest import MakeTable
from service_tables import as_executor, fragmented

from lakewarden.api.table import Table
from lakewarden.table.claim_mark import ClaimMark, claim_key
from lakewarden.table.coordinator import EmbeddedCoordinator, Liveness
from lakewarden.table.death import Evidence, LivenessUnknownError, judge
from lakewarden.table.instant import Transition
from lakewarden.table.plans import ServicePlan
from lakewarden.table.snapshot import Snapshot
from lakewarden.table.stats import CommitStats
from lakewarden.tableservice import (
    InProcessExecution,
    PlanStillExecutingError,
    ServiceContext,
    ServiceOutcome,
    TableServiceStrategy,
    execute_cancel,
    run_table_service,
)
from lakewarden.testing import ManualClock

NOW = 1_800_000_000_000
FRESH = ClaimMark("a", NOW - 1_000, 30_000)
STALE = ClaimMark("a", NOW - 31_000, 30_000)
A, D, U = Liveness.ALIVE, Liveness.DEAD, Liveness.UNKNOWN

# liveness, whom the verdict names, monitored, mark, expired, never beat, plan -> dead?
RULE = [
    (A, "a", True, None, False, False, True, False),  # 1. alive
    (A, "a", False, STALE, True, False, True, False),  # alive beats an expiry record
    (U, None, False, FRESH, False, False, True, False),  # 2. fresh claim, no verdict
    (D, "x", True, FRESH, False, False, True, False),  # a verdict on an earlier executor
    (D, "a", True, FRESH, False, False, True, True),  # 3. the monitor judged the claimer
    (U, None, True, STALE, True, False, True, True),  # a HeartbeatExpired names it
    (D, None, False, None, False, False, True, True),  # in-process: its heartbeat ended
    (U, None, True, None, False, False, True, True),  # 4. nobody holds a claim
    (U, None, False, None, False, False, True, True),
    (U, None, False, STALE, False, False, True, True),  # no monitor: the expired claim
    (U, None, True, STALE, False, False, True, False),  # monitor down: never guessed
    (D, "x", True, STALE, False, False, True, False),  # a verdict on someone else
    (U, None, True, None, False, True, False, True),  # ingestion the monitor never heard of
    (U, None, True, None, False, False, False, False),  # ingestion, no verdict
    (U, None, False, None, False, False, False, False),  # ingestion in another process
]


@pytest.mark.parametrize(
    ("liveness", "judged", "monitored", "mark", "expired", "never_beat", "plan", "dead"), RULE
)
def test_the_rule(
    liveness: Liveness,
    judged: str | None,
    monitored: bool,
    mark: ClaimMark | None,
    expired: bool,
    never_beat: bool,
    plan: bool,
    dead: bool,
) -> None:
    found = judge(
        Evidence(
            instant="20240101000000000",
            liveness=liveness,
            judged=judged,
            monitored=monitored,
            now_ms=NOW,
            plan=plan,
            mark=mark,
            expired=expired,
            never_beat=never_beat,
        )
    )
    assert found.dead is dead, found.reason
    assert found.reason


class _Monitored(EmbeddedCoordinator):
    """A process whose liveness monitor is down: it monitors, but has no verdict."""

    def monitors_liveness(self) -> bool:
        return True


def _other_process(table: Table, actor: str, clock: ManualClock) -> ServiceContext:
    opened = as_executor(table, actor, EmbeddedCoordinator())
    return dataclasses.replace(
        opened.service_context(), wall_ms=lambda: int(clock.monotonic() * 1000)
    )


def _plan_files(table: Table, instant: str) -> list[str]:
    return [o.key for o in table.storage.list("") if o.key.endswith(f"_{instant}.parquet")]


def test_a_cancel_does_not_abort_a_plan_whose_executor_has_a_fresh_claim(
    make_table: MakeTable,
) -> None:
    table = make_table()
    fragmented(table)
    instant = str(table.schedule_clustering(cancellable=True))
    clock = ManualClock(start=NOW / 1000)
    executor_a = _other_process(table, "executor-a", clock)
    b = _other_process(table, "canceller-b", clock)
    placed, finish = threading.Event(), threading.Event()

    class Pausing(InProcessExecution):
        def rewrite(
            self, strategy: TableServiceStrategy, plan: ServicePlan, base: Snapshot
        ) -> CommitStats:
            stats = super().rewrite(strategy, plan, base)
            placed.set()
            assert finish.wait(30)
            return stats

    runs: list[object] = []
    worker = threading.Thread(
        target=lambda: runs.append(run_table_service(executor_a, instant, execution=Pausing))
    )
    worker.start()
    try:
        assert placed.wait(30)
        files = _plan_files(table, instant)
        assert files
        assert b.coordinator.liveness(b.table_id, instant) is Liveness.UNKNOWN
        table.request_cancel(instant, requested_by="canceller-b", reason="reindex")
        with pytest.raises(PlanStillExecutingError, match="executor-a claimed the plan") as no:
            execute_cancel(b, instant)
        assert no.value.owner == "executor-a"
        assert _plan_files(table, instant) == files  # nothing of A's was deleted
        mine = table.state().get(instant)
        assert mine is not None and mine.state is Transition.CANCEL_REQUESTED
    finally:
        finish.set()
        worker.join(30)
    # A found the request at its pre-commit and aborted the plan itself.
    assert [r.outcome for r in runs] == [ServiceOutcome.ABORTED]  # type: ignore[attr-defined]
    assert _plan_files(table, instant) == []


def test_with_the_monitor_down_an_expired_claim_is_not_enough(make_table: MakeTable) -> None:
    table = make_table()
    fragmented(table)
    instant = str(table.schedule_clustering(cancellable=True))
    table.storage.write(claim_key(instant), ClaimMark("executor-a", NOW, 30_000).encode())
    table.request_cancel(instant, reason="reindex")
    late = dataclasses.replace(
        as_executor(table, "canceller", _Monitored()).service_context(),
        wall_ms=lambda: NOW + 60_000,
    )
    with pytest.raises(
        LivenessUnknownError, match="heartbeat-monitor has no verdict on executor-a"
    ):
        execute_cancel(late, instant)
    mine = table.state().get(instant)
    assert mine is not None and mine.state is Transition.CANCEL_REQUESTED
    # Without a monitor the expired claim is positive knowledge: the cancel goes through.
    alone = dataclasses.replace(late, coordinator=EmbeddedCoordinator())
    assert execute_cancel(alone, instant) == "aborted"


def test_the_cleaner_leaves_an_expired_plan_alone_while_its_claim_is_fresh(
    make_table: MakeTable,
) -> None:
    """The cleaner's expiry of cancellable plans asks the same rule: a plan past its policy
    whose executor (another process) claimed it a moment ago is neither cancelled nor
    aborted; once the claim expired with no monitor running, the next clean cancels it."""
    table = make_table()
    fragmented(table)
    instant = str(table.schedule_clustering(cancellable=True, cancellation_policy={"max_age_s": 1}))
    now_s = time.time() + 3600
    mark = ClaimMark("executor-a", int(now_s * 1000) - 1_000, 30_000)
    table.storage.write(claim_key(instant), mark.encode())
    result = table.clean(wall_clock=lambda: now_s)
    assert result.cancelled == ()
    mine = table.state().get(instant)
    assert mine is not None and mine.state is Transition.REQUESTED
    later = table.clean(wall_clock=lambda: now_s + 60)
    assert later.cancelled == (instant,)
    mine = table.state().get(instant)
    assert mine is not None and mine.state is Transition.ABORTED
