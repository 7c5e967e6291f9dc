"""Compaction of merge-on-read tables as an RFC-79 table service: a read never changes, a
killed run resumes, ingestion races follow RFC-79's rules, and compacted MOR reads as COW."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from _hypothesis_profiles import examples
from _memstore import MemStorage
from click.testing import CliRunner
from conftest import MakeTable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from service_tables import as_executor, as_sorted, rows

from lakewarden.api.table import Table
from lakewarden.cli import cli
from lakewarden.table.config import TableConfig, save_new_config
from lakewarden.table.conflicts import PendingPlanConflict
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.instant import Action, Transition
from lakewarden.table.plans import ServicePlan
from lakewarden.table.stats import CommitStats
from lakewarden.tableservice import (
    PlanningInput,
    RewriteJob,
    ServiceOutcome,
    TableServiceStrategy,
    register_strategy,
    schedule,
)
from lakewarden.tableservice.compaction import CompactionStrategy
from lakewarden.testing import SimulatedCrash


def mor_table(make: MakeTable) -> tuple[Table, list[dict[str, Any]]]:
    """A merge-on-read table with log blocks in every slice it has, and what it reads as."""
    table = make(table_type="merge_on_read")
    table.write(rows(*[(i, "eu" if i % 2 else "us", 1, f"a{i}") for i in range(12)]), "upsert")
    table.write(rows(*[(i, "eu" if i % 2 else "us", 2, f"b{i}") for i in range(0, 12, 3)]))
    table.write(rows(*[(i, "eu" if i % 2 else "us", 0, "") for i in range(1, 12, 4)]), "delete")
    table.write(rows((2, "us", 0, "stale"), (5, "eu", 3, "c5")))
    assert all(s.log_files for s in table.snapshot().slices.values())
    return table, as_sorted(table.read())


def _state(table: Table, instant: str) -> Transition:
    mine = table.state().get(str(instant))
    assert mine is not None
    return mine.state


def test_compaction_merges_log_blocks_into_base_files_and_changes_no_read(
    make_any_table: MakeTable,
) -> None:
    table, expected = mor_table(make_any_table)
    before = table.snapshot().as_of
    instant = table.schedule_compaction()
    assert instant is not None
    assert table.state().get(str(instant)).action is Action.COMPACTION  # type: ignore[union-attr]
    run = table.run_table_service(instant)
    assert run.outcome is ServiceOutcome.COMPLETED
    slices = table.snapshot().slices.values()
    assert slices and all(not s.log_files and s.base_instant == str(instant) for s in slices)
    assert as_sorted(table.read()) == expected
    assert as_sorted(table.read(as_of=before)) == expected  # time travel past it too
    assert table.schedule_compaction() is None  # nothing left to compact


def test_copy_on_write_and_log_free_slices_have_nothing_to_compact(make_table: MakeTable) -> None:
    table = make_table(table_type="merge_on_read")
    table.write(rows((1, "eu", 1, "a")), "upsert")
    assert table.schedule_compaction() is None


class CrashingCompaction(TableServiceStrategy):
    """Compaction that dies after writing its files, before the pre-commit (once)."""

    name: ClassVar[str] = "test.crashing-compaction"
    action: ClassVar[Action] = Action.COMPACTION
    crashes: ClassVar[int] = 1

    def __init__(self, plan: ServicePlan | None = None) -> None:
        self.inner = CompactionStrategy()

    def plan(self, source: PlanningInput) -> ServicePlan | None:
        return self.inner.plan(source)

    def rewrite(self, job: RewriteJob) -> CommitStats:
        stats = self.inner.rewrite(job)
        if CrashingCompaction.crashes:
            CrashingCompaction.crashes -= 1
            raise SimulatedCrash()
        return stats


register_strategy(CrashingCompaction.name, CrashingCompaction)


def test_a_compaction_killed_mid_way_is_resumed_by_another_executor(
    make_any_table: MakeTable,
) -> None:
    table, expected = mor_table(make_any_table)
    CrashingCompaction.crashes = 1
    instant = schedule(table.service_context(), CrashingCompaction())
    assert instant is not None
    with pytest.raises(SimulatedCrash):
        table.run_table_service(instant)
    assert _state(table, instant) is not Transition.COMPLETED
    assert as_sorted(table.read()) == expected  # its files are invisible
    run = as_executor(table, "executor-b").run_table_service(instant)
    assert run.outcome is ServiceOutcome.COMPLETED
    assert as_sorted(table.read()) == expected
    assert all(not s.log_files for s in table.snapshot().slices.values())


def test_ingestion_waits_for_a_non_cancellable_compaction(make_table: MakeTable) -> None:
    table, expected = mor_table(make_table)
    instant = table.schedule_compaction()
    assert instant is not None
    with pytest.raises(PendingPlanConflict):
        table.write(rows((0, "us", 9, "during")))
    assert as_sorted(table.read()) == expected  # the refused write left nothing
    assert table.run_table_service(instant).outcome is ServiceOutcome.COMPLETED
    table.write(rows((0, "us", 9, "after")))
    after = {r["id"]: r for r in expected} | {0: {"id": 0, "region": "us", "ts": 9, "v": "after"}}
    assert as_sorted(table.read()) == [after[k] for k in sorted(after)]


def test_ingestion_beats_a_cancellable_compaction(make_table: MakeTable) -> None:
    table, expected = mor_table(make_table)
    instant = table.schedule_compaction(cancellable=True)
    assert instant is not None
    table.write(rows((0, "us", 9, "during")))
    run = table.run_table_service(instant)
    assert run.outcome is ServiceOutcome.ABORTED
    assert _state(table, instant) is Transition.ABORTED
    after = {r["id"]: r for r in expected} | {0: {"id": 0, "region": "us", "ts": 9, "v": "during"}}
    assert as_sorted(table.read()) == [after[k] for k in sorted(after)]


def test_lakewarden_compact_schedule_and_run(tmp_path: Any) -> None:
    uri = str(tmp_path / "t")
    table = Table.create(
        uri,
        name="orders",
        record_key="id",
        schema=rows().schema,
        partition_by=["region"],
        ordering_field="ts",
        table_type="merge_on_read",
    )
    table.write(rows((1, "eu", 1, "a"), (2, "us", 1, "b")), "upsert")
    table.write(rows((1, "eu", 2, "a2")))
    runner = CliRunner()
    scheduled = runner.invoke(cli, ["compact", "schedule", uri])
    assert scheduled.exit_code == 0, scheduled.output
    instant = scheduled.output.strip()
    ran = runner.invoke(cli, ["compact", "run", uri])
    assert ran.exit_code == 0 and ran.output.strip() == f"{instant} completed", ran.output
    assert as_sorted(Table.open(uri).read()) == [
        {"id": 1, "region": "eu", "ts": 2, "v": "a2"},
        {"id": 2, "region": "us", "ts": 1, "v": "b"},
    ]
    cow = str(tmp_path / "cow")
    Table.create(cow, name="cow", record_key="id", schema=rows().schema)
    refused = runner.invoke(cli, ["compact", "schedule", cow])
    assert refused.exit_code == 1 and "copy-on-write" in refused.output


def test_compact_schedule_takes_the_cancellation_policy_that_cluster_schedule_takes(
    tmp_path: Any,
) -> None:
    """RFC-79's options are the same on both ``schedule`` commands: a compaction plan carries
    ``cancellable`` and the policy the cleaner honours, limited to the partitions named."""
    uri = str(tmp_path / "t")
    table = Table.create(
        uri,
        name="orders",
        record_key="id",
        schema=rows().schema,
        partition_by=["region"],
        ordering_field="ts",
        table_type="merge_on_read",
    )
    table.write(rows((1, "eu", 1, "a"), (2, "us", 1, "b")), "upsert")
    table.write(rows((1, "eu", 2, "a2"), (2, "us", 2, "b2")))
    args = ["compact", "schedule", uri, "--cancellable", "--max-age", "2h", "--max-instants", "5"]
    scheduled = CliRunner().invoke(cli, [*args, "--partition", "region=eu"])
    assert scheduled.exit_code == 0, scheduled.output
    mine = table.state().get(scheduled.output.strip())
    assert mine is not None and mine.cancellable
    plan = mine.plan
    assert isinstance(plan, ServicePlan)
    assert plan.cancellation_policy is not None
    assert plan.cancellation_policy.max_age_s == 7200
    assert plan.cancellation_policy.max_completed_instants == 5
    assert {s.file_group.partition_path for s in plan.input_slices} == {"region=eu"}


# -- the property, after compaction ---------------------------------------------------------

_RECORD = st.tuples(
    st.integers(0, 7), st.sampled_from(["eu", "us"]), st.integers(0, 3), st.sampled_from("xyz")
)
_BATCH = st.tuples(
    st.sampled_from(["insert", "upsert", "upsert", "delete"]),
    st.lists(_RECORD, min_size=1, max_size=5),
)


def every(table: Any) -> list[tuple[Any, ...]]:
    """All records, fully ordered (a key lives once per partition: ``as_sorted`` ties)."""
    return sorted(tuple(r.values()) for r in table.select(rows().schema.names).to_pylist())


def _memory(table_type: str) -> Table:
    storage = MemStorage()
    config = TableConfig.new(
        name="orders",
        record_key="id",
        schema=rows().schema,
        partition_by=["region"],
        ordering_field="ts",
        buckets=2,
        table_type=table_type,
    )
    save_new_config(storage, config)
    return Table(storage, config, coordinator=EmbeddedCoordinator())


@settings(max_examples=examples(10), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_BATCH, min_size=1, max_size=5), st.lists(_BATCH, max_size=2))
def test_property_compacted_merge_on_read_reads_as_copy_on_write(
    batches: list[tuple[str, list[Any]]], later: list[tuple[str, list[Any]]]
) -> None:
    cow, mor = _memory("cow"), _memory("merge_on_read")
    for operation, records in batches:
        cow.write(rows(*records), operation)
        mor.write(rows(*records), operation)
    instant = mor.schedule_compaction()
    if instant is not None:
        assert mor.run_table_service(instant).outcome is ServiceOutcome.COMPLETED
    assert every(mor.read()) == every(cow.read())
    for operation, records in later:  # and writes after the compaction
        cow.write(rows(*records), operation)
        mor.write(rows(*records), operation)
    assert every(mor.read()) == every(cow.read())
