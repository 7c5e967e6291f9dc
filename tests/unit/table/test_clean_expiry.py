"""Expiry of cancellable plans by the clean (RFC-79 goal C): past the cancellation policy and
with no live executor, request_cancel then execute_cancel; a live executor is never touched."""

from __future__ import annotations

import time

import pyarrow as pa
from _memstore import MemStorage

from lakewarden.table import Action, CleanPolicy, Table, TableConfig, Transition
from lakewarden.table.config import save_new_config
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.plans import CancellationPolicy, ServicePlan
from lakewarden.table.transaction import WriteTransaction
from lakewarden.testing import ManualClock

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("region", pa.string()),
        pa.field("v", pa.string()),
    ]
)
HOUR = 3600.0
KEEP_ONE = CleanPolicy(commits_retained=1, retention_window_s=0)


def table_with_plan(policy: CancellationPolicy) -> tuple[Table, str, str]:
    """Two versions of region a, a cancellable clustering plan over a's file group, then two
    versions of region b (which leave a alone): (table, the last instant of a, the plan)."""
    store = MemStorage()
    config = TableConfig.new(name="t", record_key="id", schema=SCHEMA, partition_by=["region"])
    save_new_config(store, config)
    table = Table(store, config, coordinator=EmbeddedCoordinator())
    write(table, "a0", "a")
    first = write(table, "a1", "a")
    group = table.snapshot().base_files()[0].file_group
    plan = WriteTransaction.begin(
        table.timeline_log,
        table.coordinator,
        table.table_id,
        operation="cluster",
        actor="planner",
        action=Action.CLUSTERING,
        cancellable=True,
        plan=ServicePlan(
            file_groups=(group,), cancellation_policy=policy, last_completed_instant=first
        ),
    )
    write(table, "b0", "b")
    write(table, "b1", "b")
    return table, first, plan.instant


def write(table: Table, value: str, region: str = "b") -> str:
    rows = [{"id": 1 if region == "a" else 2, "region": region, "v": value}]
    return table.write(pa.Table.from_pylist(rows, schema=SCHEMA)).instant


def state_of(table: Table, instant: str) -> Transition:
    current = table.state().get(instant)
    assert current is not None
    return current.state


def test_plan_past_its_age_is_cancelled_and_its_files_freed() -> None:
    table, first, plan = table_with_plan(CancellationPolicy(max_age_s=HOUR))
    clock = ManualClock(start=time.time())
    inside = table.clean(KEEP_ONE, wall_clock=clock.monotonic)
    assert inside.cancelled == () and len(inside.files) == 1  # b0; a0 is pinned by the plan
    assert state_of(table, plan) is Transition.REQUESTED
    clock.advance(2 * HOUR)
    dry = table.clean(KEEP_ONE, dry_run=True, wall_clock=clock.monotonic)
    assert dry.cancelled == (plan,) and state_of(table, plan) is Transition.REQUESTED
    outside = table.clean(KEEP_ONE, wall_clock=clock.monotonic)
    assert outside.cancelled == (plan,)
    assert state_of(table, plan) is Transition.ABORTED
    entries = [e.transition for e in table.timeline_log.entries() if e.instant == plan]
    assert entries == [Transition.REQUESTED, Transition.CANCEL_REQUESTED, Transition.ABORTED]
    assert [f.path.split("/")[0] for f in outside.files] == ["region=a"]  # a0, now freed


def test_plan_past_its_completed_instants_is_cancelled() -> None:
    table, _, plan = table_with_plan(CancellationPolicy(max_completed_instants=3))
    assert table.clean(KEEP_ONE).cancelled == ()  # 2 writes since it was scheduled
    write(table, "b2")
    assert table.clean(KEEP_ONE).cancelled == (plan,)
    assert state_of(table, plan) is Transition.ABORTED


def test_a_live_executor_is_never_cancelled() -> None:
    table, _, plan = table_with_plan(CancellationPolicy(max_age_s=1))
    later = ManualClock(start=time.time() + HOUR).monotonic
    with table.coordinator.heartbeat(table.table_id, plan, "executor"):
        result = table.clean(KEEP_ONE, wall_clock=later)
    assert result.cancelled == () and state_of(table, plan) is Transition.REQUESTED
    assert table.clean(KEEP_ONE, wall_clock=later).cancelled == (plan,)  # it stopped beating


def test_a_plan_without_policy_stays_unless_its_cancel_was_requested() -> None:
    table, _, plan = table_with_plan(CancellationPolicy())
    later = ManualClock(start=time.time() + 1000 * HOUR).monotonic
    assert table.clean(KEEP_ONE, wall_clock=later).cancelled == ()
    table.request_cancel(plan, reason="operator")
    assert table.clean(KEEP_ONE).cancelled == (plan,)
    assert state_of(table, plan) is Transition.ABORTED
