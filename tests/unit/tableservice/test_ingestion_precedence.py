"""RFC-79's ingestion precedence, exactly (issue 32, finding 3): a cancellable plan does not
complete while an ingestion that went inflight (or a pending non-cancellable plan) targets its
file groups, pending or not; the ingestion wins unless the plan completed before the
ingestion's step (2), its inflight, and that step runs the conflict rules."""

from __future__ import annotations

import pyarrow as pa
import pytest
from _memstore import MemStorage
from conftest import MakeTable
from service_tables import SCHEMA, fragmented, rows

from lakewarden.api.table import Table
from lakewarden.storage.faults import FaultyStorage
from lakewarden.table.config import TableConfig, save_new_config
from lakewarden.table.conflicts import IngestionPrecedenceConflict, OverlappingCommitConflict
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.instant import Action, Transition
from lakewarden.table.plans import ServicePlan
from lakewarden.table.stats import CommitStats, WorkloadProfile
from lakewarden.table.timeline import IllegalTransitionError
from lakewarden.table.timeline_state import EntryDraft
from lakewarden.table.transaction import WriteTransaction
from lakewarden.tableservice import ServiceOutcome


def state_of(table: Table, instant: str) -> Transition:
    found = table.state().get(instant)
    assert found is not None
    return found.state


def faulty_table() -> tuple[Table, FaultyStorage]:
    faulty = FaultyStorage(MemStorage())
    config = TableConfig.new(
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        ordering_field="ts",
        buckets=2,
    )
    save_new_config(faulty, config)
    return Table(faulty, config, coordinator=EmbeddedCoordinator(), actor="writer"), faulty


def test_issue_32_an_inflight_ingestion_beats_the_cancellable_plan() -> None:
    """The issue's reproduction: an upsert is inflight on the plan's file groups when the plan
    reaches its pre-commit. Before, the plan completed and the upsert then failed with
    ``OverlappingCommitConflict``; RFC-79 says the ingestion wins."""
    table, faulty = faulty_table()
    table.write(rows(*[(i, "eu" if i % 2 else "us", 1, "v1") for i in range(8)]))
    table.write(rows(*[(i, "eu" if i % 2 else "us", 2, "v2") for i in range(8)]))
    plan = str(table.schedule_clustering(cancellable=True, sort_by=["id"]))
    executor = Table(faulty.inner, table.config, coordinator=EmbeddedCoordinator(), actor="exec")
    runs = []
    # requested, inflight, then the first data file: the plan runs between inflight and it.
    faulty.before(
        "write_if_absent",
        lambda: runs.append(executor.run_table_service(plan)),
        nth=faulty.calls("write_if_absent") + 3,
    )
    upsert = table.write(rows(*[(i, "eu" if i % 2 else "us", 3, "v3") for i in range(8)]))
    assert runs and runs[0].outcome is ServiceOutcome.ABORTED
    assert "IngestionPrecedenceConflict" in (runs[0].reason or "")
    assert state_of(table, plan) is Transition.ABORTED
    assert state_of(table, upsert.instant) is Transition.COMPLETED
    assert set(table.read().column("v").to_pylist()) == {"v3"}


def _plan_inflight(table: Table, *, cancellable: bool) -> tuple[WriteTransaction, ServicePlan]:
    groups = tuple(table.snapshot().slices)
    plan = ServicePlan(file_groups=groups, last_completed_instant=table.timeline()[-1].instant)
    txn = WriteTransaction.begin(
        table.timeline_log,
        table.coordinator,
        table.table_id,
        operation="cluster",
        actor="planner",
        action=Action.CLUSTERING,
        cancellable=cancellable,
        plan=plan,
    )
    txn.inflight(WorkloadProfile(operation="cluster", file_groups=groups))
    return txn, plan


def test_the_state_machine_rejects_a_plan_completing_under_an_inflight_ingestion(
    make_table: MakeTable,
) -> None:
    """A zombie executor that skips its pre-commit is judged by every reader the same way."""
    table = make_table()
    fragmented(table)
    plan, service_plan = _plan_inflight(table, cancellable=True)
    ingestion = WriteTransaction.begin(
        table.timeline_log, table.coordinator, table.table_id, operation="upsert", actor="w"
    )
    ingestion.inflight(WorkloadProfile(operation="upsert", file_groups=service_plan.file_groups))
    zombie = EntryDraft(
        instant=plan.instant,
        action=Action.CLUSTERING,
        transition=Transition.COMPLETED,
        actor="zombie",
        lock_token=None,
        wall_time_ms=0,
        payload=CommitStats(operation="cluster").model_dump(mode="json"),
    )
    with pytest.raises(IllegalTransitionError, match="IngestionPrecedenceConflict"):
        table.timeline_log.append(lambda _state: zombie)
    with pytest.raises(IngestionPrecedenceConflict):
        plan.complete(CommitStats(operation="cluster"))
    ingestion.complete(CommitStats(operation="upsert"))  # the ingestion wins
    assert state_of(table, ingestion.instant) is Transition.COMPLETED


def test_a_requested_ingestion_targets_nothing_yet(make_table: MakeTable) -> None:
    """Only step (2) declares the file groups: a merely requested ingestion does not block."""
    table = make_table()
    fragmented(table)
    plan, _ = _plan_inflight(table, cancellable=True)
    WriteTransaction.begin(
        table.timeline_log, table.coordinator, table.table_id, operation="upsert", actor="w"
    )
    plan.complete(CommitStats(operation="cluster"))
    assert state_of(table, plan.instant) is Transition.COMPLETED


def test_a_pending_non_cancellable_plan_beats_a_cancellable_one(make_table: MakeTable) -> None:
    table = make_table()
    fragmented(table)
    cancellable, _ = _plan_inflight(table, cancellable=True)
    other, _ = _plan_inflight(table, cancellable=False)  # scheduled later, still pending
    with pytest.raises(IngestionPrecedenceConflict, match=other.instant):
        cancellable.complete(CommitStats(operation="cluster"))
    other.complete(CommitStats(operation="cluster"))
    assert state_of(table, other.instant) is Transition.COMPLETED


def test_step_two_an_ingestion_inflight_after_the_plan_completed_stops_there(
    make_table: MakeTable,
) -> None:
    """The plan completed before the ingestion's step (2): the ingestion may not proceed, and
    learns it when it goes inflight, before it writes anything."""
    table = make_table()
    fragmented(table)
    plan, service_plan = _plan_inflight(table, cancellable=True)
    ingestion = WriteTransaction.begin(
        table.timeline_log, table.coordinator, table.table_id, operation="upsert", actor="w"
    )
    plan.complete(CommitStats(operation="cluster"))  # before the ingestion's inflight
    with pytest.raises(OverlappingCommitConflict, match=plan.instant):
        ingestion.inflight(
            WorkloadProfile(operation="upsert", file_groups=service_plan.file_groups)
        )
    assert state_of(table, ingestion.instant) is Transition.REQUESTED  # nothing appended
    assert state_of(table, plan.instant) is Transition.COMPLETED


def test_a_write_requested_after_the_plan_completed_builds_on_it() -> None:
    table, _ = faulty_table()
    table.write(rows(*[(i, "eu", 1, "v1") for i in range(4)]))
    table.write(rows(*[(i, "eu", 2, "v2") for i in range(4)]))
    plan = str(table.schedule_clustering(cancellable=True, sort_by=["id"]))
    assert table.run_table_service(plan).outcome is ServiceOutcome.COMPLETED
    # An ordinary write requested after the plan completed builds on it: no conflict.
    table.write(pa.Table.from_pylist([{"id": 1, "region": "eu", "ts": 3, "v": "v3"}], SCHEMA))
    assert sorted(table.read().column("v").to_pylist()) == ["v2", "v2", "v2", "v3"]
