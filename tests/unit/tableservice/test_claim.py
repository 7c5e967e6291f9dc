"""The claim window: right after an executor claims a plan, heartbeat-monitor's liveness view
may not have its first beat yet (UNKNOWN, or DEAD from an earlier executor's record). The claim
mark left in storage under the lock makes a second executor refuse all the same, until the
monitor judges the claimer or the mark expires; a claimer that stops removes its mark."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from _memstore import MemStorage
from service_tables import SCHEMA, fragmented

from lakewarden.api.table import Table
from lakewarden.table.config import TableConfig, save_new_config
from lakewarden.table.coordinator import EmbeddedCoordinator, Liveness
from lakewarden.tableservice import PlanAlreadyExecutingError, ServiceContext
from lakewarden.tableservice.claim import ClaimMark, claim, claim_key, read_claim

NOW_MS = 1_800_000_000_000


class MonitorView:
    """heartbeat-monitor's changelog as every process reads it: only what the test says it
    has processed so far (the lag is the point)."""

    def __init__(self) -> None:
        self.records: dict[str, tuple[Liveness, str]] = {}


class ProcessCoordinator(EmbeddedCoordinator):
    """One executor process: the table lock shared with the others, its own beats alive
    here, everyone else's only through the (lagging) monitor view."""

    def __init__(self, shared: EmbeddedCoordinator, view: MonitorView) -> None:
        super().__init__()
        self.shared = shared
        self.view = view
        self.fail_first_beat = False

    def lock(self, table_id: str, *, ttl_s: float = 30.0, wait_s: float = 30.0):  # type: ignore[no-untyped-def]
        return self.shared.lock(table_id, ttl_s=ttl_s, wait_s=wait_s)

    def liveness(self, table_id: str, instant: str) -> Liveness:
        if super().liveness(table_id, instant) is Liveness.ALIVE:
            return Liveness.ALIVE
        return self.view.records.get(instant, (Liveness.UNKNOWN, ""))[0]

    def executor_of(self, table_id: str, instant: str) -> str | None:
        record = self.view.records.get(instant)
        return None if record is None else record[1]

    @contextmanager
    def heartbeat(self, table_id: str, instant: str, owner: str) -> Iterator[None]:
        if self.fail_first_beat:
            raise RuntimeError("first beat not delivered")
        with super().heartbeat(table_id, instant, owner):
            yield


@pytest.fixture
def plan() -> tuple[Table, str]:
    storage = MemStorage()
    config = TableConfig.new(
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        ordering_field="ts",
        buckets=2,
    )
    save_new_config(storage, config)
    table = Table(storage, config, coordinator=EmbeddedCoordinator(), actor="scheduler")
    fragmented(table)
    instant = table.schedule_clustering()
    assert instant is not None
    return table, str(instant)


def executors(table: Table, *names: str) -> tuple[MonitorView, list[ServiceContext]]:
    view, shared = MonitorView(), EmbeddedCoordinator()
    base = table.service_context()
    return view, [
        dataclasses.replace(base, coordinator=ProcessCoordinator(shared, view), actor=name)
        for name in names
    ]


def test_a_fresh_claim_refuses_a_second_executor_while_the_view_knows_nothing(
    plan: tuple[Table, str],
) -> None:
    table, instant = plan
    view, (a, b) = executors(table, "executor-a", "executor-b")
    with claim(a, instant, wall_ms=lambda: NOW_MS):
        mark = read_claim(a, instant)
        assert mark == ClaimMark("executor-a", NOW_MS, 30_000)
        with pytest.raises(PlanAlreadyExecutingError, match="executor-a") as refused:
            with claim(b, instant, wall_ms=lambda: NOW_MS + 1_000):
                pytest.fail("the second executor ran")
        assert refused.value.owner == "executor-a"
        assert "claimed the plan 1.0 s ago" in str(refused.value)
        # A stale verdict on an earlier executor is no verdict on this one.
        view.records[instant] = (Liveness.DEAD, "executor-dead-before")
        with pytest.raises(PlanAlreadyExecutingError, match="executor-a"):
            with claim(b, instant, wall_ms=lambda: NOW_MS + 2_000):
                pytest.fail("the second executor ran")
    assert read_claim(a, instant) is None  # removed when the claimer stopped


def test_a_stopped_claimer_does_not_hold_up_the_next(plan: tuple[Table, str]) -> None:
    table, instant = plan
    _, (a, b) = executors(table, "executor-a", "executor-b")
    with claim(a, instant, wall_ms=lambda: NOW_MS):
        pass
    with claim(b, instant, wall_ms=lambda: NOW_MS + 10):
        assert read_claim(b, instant) == ClaimMark("executor-b", NOW_MS + 10, 30_000)


def test_a_crashed_claimers_mark_gives_way_to_a_verdict_or_expires(
    plan: tuple[Table, str],
) -> None:
    table, instant = plan
    view, (a, b, c) = executors(table, "executor-a", "executor-b", "executor-c")
    # executor-a claimed and was killed: its mark stays behind.
    a.storage.write(claim_key(instant), ClaimMark("executor-a", NOW_MS, 30_000).encode())
    with pytest.raises(PlanAlreadyExecutingError):
        with claim(b, instant, wall_ms=lambda: NOW_MS + 29_999):
            pytest.fail("ran inside the claim window")
    with claim(b, instant, wall_ms=lambda: NOW_MS + 30_000):  # expired, no verdict needed
        pass
    a.storage.write(claim_key(instant), ClaimMark("executor-a", NOW_MS, 30_000).encode())
    view.records[instant] = (Liveness.DEAD, "executor-a")  # the monitor judged it dead
    with claim(c, instant, wall_ms=lambda: NOW_MS + 1):
        pass


def test_a_claim_whose_first_beat_failed_leaves_no_mark(plan: tuple[Table, str]) -> None:
    table, instant = plan
    _, (a, b) = executors(table, "executor-a", "executor-b")
    assert isinstance(a.coordinator, ProcessCoordinator)
    a.coordinator.fail_first_beat = True
    with pytest.raises(RuntimeError, match="first beat"):
        with claim(a, instant, wall_ms=lambda: NOW_MS):
            pytest.fail("ran without a heartbeat")
    assert read_claim(a, instant) is None
    with claim(b, instant, wall_ms=lambda: NOW_MS + 1):
        pass


def test_an_unreadable_mark_is_no_claim(plan: tuple[Table, str]) -> None:
    table, instant = plan
    _, (a,) = executors(table, "executor-a")
    a.storage.write(claim_key(instant), b"{torn")
    assert read_claim(a, instant) is None
    with claim(a, instant):
        pass
