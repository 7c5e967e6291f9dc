"""A retried plan fences the earlier attempts on the timeline before it deletes their files.

Executor Z stalls mid-rewrite past its claim tolerance; executor B, another process (its own
coordinator: no shared lock, no shared heartbeats), claims the plan because Z's mark expired,
and rolls Z's attempt back. Z wakes up between B's check and B's first delete and tries to
complete. Before the fence existed, Z completed and B deleted the files Z's ``completed``
names: the plan was completed and ``read()`` raised ``FileNotFoundError``. Now B's ``inflight``
naming its own attempt is on the log before its first delete, so the state machine refuses
Z's completion (``AttemptFencedError``) and the table holds exactly B's output.

The interleaving is deterministic: ``FaultyStorage.before`` runs Z's completion just before
B's first delete; the claim mark's age comes from a ``ManualClock`` the test moves.
"""

from __future__ import annotations

import dataclasses
import threading

from conftest import MakeTable
from service_tables import as_executor, as_sorted, fragmented

from lakewarden.api.table import Table
from lakewarden.storage.faults import FaultyStorage
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.instant import Transition
from lakewarden.table.plans import ServicePlan
from lakewarden.table.snapshot import Snapshot
from lakewarden.table.stats import CommitStats
from lakewarden.tableservice import (
    AttemptFencedError,
    InProcessExecution,
    ServiceContext,
    ServiceOutcome,
    ServiceRun,
    TableServiceStrategy,
    run_table_service,
)
from lakewarden.testing import ManualClock

TOLERANCE_S = 30.0  # the embedded coordinator's heartbeat tolerance: a claim mark counts this long


def _process(
    table: Table, actor: str, clock: ManualClock, storage: object = None
) -> ServiceContext:
    """The table as another process sees it: its own coordinator, wall time from ``clock``."""
    opened = as_executor(table, actor, EmbeddedCoordinator())
    if storage is not None:
        opened = Table(storage, table.config, coordinator=opened.coordinator, actor=actor)
    return dataclasses.replace(
        opened.service_context(), wall_ms=lambda: int(clock.monotonic() * 1000)
    )


def test_a_retry_fences_the_stalled_attempt_before_deleting_its_files(
    make_table: MakeTable,
) -> None:
    table = make_table()
    fragmented(table)
    expected = as_sorted(table.read())
    instant = str(table.schedule_clustering(cancellable=False))
    clock = ManualClock(start=1_800_000_000.0)
    zombie = _process(table, "executor-z", clock)
    faulty = FaultyStorage(table.storage)
    newer = _process(table, "executor-b", clock, storage=faulty)

    stalled, wake = threading.Event(), threading.Event()

    class Stalling(InProcessExecution):
        """Z's step 5: its files are placed (still invisible), then it stalls."""

        def rewrite(
            self, strategy: TableServiceStrategy, plan: ServicePlan, base: Snapshot
        ) -> CommitStats:
            stats = super().rewrite(strategy, plan, base)
            stalled.set()
            assert wake.wait(30)
            return stats

    outcome: dict[str, object] = {}

    def run_zombie() -> None:
        try:
            outcome["run"] = run_table_service(zombie, instant, execution=Stalling)
        except Exception as err:
            outcome["error"] = err

    z = threading.Thread(target=run_zombie)
    z.start()
    assert stalled.wait(30)  # Z's files are in place; it stalls before its pre-commit
    clock.advance(TOLERANCE_S + 1)  # Z's claim mark no longer counts

    def zombie_completes_now() -> None:
        wake.set()
        z.join(30)
        assert not z.is_alive()

    faulty.before("delete", zombie_completes_now)  # between B's check and its first delete
    run = run_table_service(newer, instant)
    assert faulty.pending() == 0, "B deleted nothing: the race was not run"

    assert isinstance(run, ServiceRun) and run.outcome is ServiceOutcome.COMPLETED
    assert isinstance(outcome.get("error"), AttemptFencedError), outcome
    mine = table.state().get(instant)
    assert mine is not None and mine.state is Transition.COMPLETED and mine.commit is not None
    assert mine.commit.attempt == run.attempt
    missing = [s.path for s in mine.commit.write_stats if not table.storage.exists(s.path)]
    assert missing == []
    assert as_sorted(table.read()) == expected
