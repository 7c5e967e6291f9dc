"""apache/hudi#10965 (HUDI-7503): two jobs executed one compaction plan at once; one created
the plan's inflight and commit while the other rolled it back, deleting instant and data
files: a corrupted table.

Here, with two executor processes that share no lock and see no heartbeat of each other:

1. while the first executor's claim is fresh, the second refuses to run the plan
   (``PlanAlreadyExecutingError`` naming the first): the claim mark is the evidence of a live
   executor when no monitor can say;
2. once the first stalled past its claim tolerance, the second may run the plan, but its
   ``inflight`` fences the first attempt before any of the first one's files is deleted; the
   first, waking up, cannot complete (``AttemptFencedError``), the second completes, and the
   merge-on-read table reads exactly the records it had, once each.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest
from _fence_safety import by_id, new_table, process, rows

from lakewarden.table.instant import Transition
from lakewarden.table.plans import ServicePlan
from lakewarden.table.snapshot import Snapshot
from lakewarden.table.stats import CommitStats
from lakewarden.tableservice import (
    AttemptFencedError,
    InProcessExecution,
    PlanAlreadyExecutingError,
    ServiceOutcome,
    TableServiceStrategy,
    run_table_service,
)
from lakewarden.testing import ManualClock


def test_hudi_10965_two_jobs_on_one_compaction_plan_commit_it_once(tmp_path: Path) -> None:
    table = new_table(tmp_path, table_type="merge_on_read")
    table.write(rows("base", range(12)), "upsert")
    table.write(rows("update", range(0, 12, 3), ts=2))
    expected = by_id(table)
    instant = str(table.schedule_compaction())
    clock = ManualClock(start=1_800_000_000.0)

    def job(actor: str):  # type: ignore[no-untyped-def]
        context = process(table, actor).service_context()
        return dataclasses.replace(context, wall_ms=lambda: int(clock.monotonic() * 1000))

    first, second = job("job-1"), job("job-2")
    stalled, wake = threading.Event(), threading.Event()

    class Stalls(InProcessExecution):
        def rewrite(
            self, strategy: TableServiceStrategy, plan: ServicePlan, base: Snapshot
        ) -> CommitStats:
            stats = super().rewrite(strategy, plan, base)
            stalled.set()
            assert wake.wait(30)
            return stats

    outcome: dict[str, object] = {}

    def run_first() -> None:
        try:
            outcome["run"] = run_table_service(first, instant, execution=Stalls)
        except Exception as err:
            outcome["error"] = err

    thread = threading.Thread(target=run_first)
    thread.start()
    assert stalled.wait(30)
    with pytest.raises(PlanAlreadyExecutingError, match="job-1"):  # 1.
        run_table_service(second, instant)

    clock.advance(31)  # 2.: the first job's claim no longer counts
    run = run_table_service(second, instant)
    wake.set()
    thread.join(30)

    assert run.outcome is ServiceOutcome.COMPLETED
    assert isinstance(outcome.get("error"), AttemptFencedError), outcome
    mine = table.state().get(instant)
    assert mine is not None and mine.state is Transition.COMPLETED and mine.commit is not None
    assert mine.commit.attempt == run.attempt
    assert all(table.storage.exists(s.path) for s in mine.commit.write_stats)
    assert by_id(table) == expected
    assert len(table.read()) == len(expected)
