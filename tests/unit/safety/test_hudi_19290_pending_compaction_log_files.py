"""apache/hudi#19290: the cleaner deleted a log file that a pending compaction plan had
picked up (a log file whose instant was older than the slice's base file), and the compaction
then failed with ``FileNotFoundException``.

Here a pending compaction or clustering plan protects its file groups whole, every slice of
them, whatever the policy (``lakewarden.table.clean.retention`` rule 4), and the plan's own
snapshot (its ``last_completed_instant``, rule 3). So every clean policy at its most
aggressive, run while the plan waits, leaves every file the plan reads, and the compaction
then completes with the rows the table had."""

from __future__ import annotations

from pathlib import Path

import pytest
from _readers_safety import AGGRESSIVE, far_future, new_table, process, rows

from lakewarden.table.clean import CleanPolicy
from lakewarden.table.instant import Action
from lakewarden.table.plans import ServicePlan
from lakewarden.table.transaction import WriteTransaction
from lakewarden.tableservice import ServiceOutcome


@pytest.mark.parametrize("policy", AGGRESSIVE, ids=lambda p: p.policy.value)
def test_hudi_19290_clean_keeps_every_log_file_a_pending_compaction_reads(
    tmp_path: Path, policy: CleanPolicy
) -> None:
    table = new_table(tmp_path / "t", table_type="mor")
    table.write(rows("v0"), "upsert")  # base files
    for n in range(1, 4):  # log files on them
        table.write(rows(f"v{n}", range(0, 8, 2), ts=n + 1), "upsert")
    before = sorted(table.read().to_pylist(), key=lambda r: r["id"])
    plan = table.schedule_compaction()
    assert plan is not None
    planned = [
        path
        for file_slice in table.snapshot().slices.values()
        for path in file_slice.paths
        if file_slice.log_files
    ]
    assert any(".log." in p for p in planned)
    cleaner = process(table, "cleaner")  # another process, no shared lock
    cleaner.clean(policy, wall_clock=far_future)
    for path in planned:
        assert table.storage.exists(path), path
    run = table.run_table_service(plan)
    assert run.outcome is ServiceOutcome.COMPLETED
    assert sorted(table.read().to_pylist(), key=lambda r: r["id"]) == before


@pytest.mark.parametrize("policy", AGGRESSIVE, ids=lambda p: p.policy.value)
def test_hudi_19290_a_planned_slice_older_than_the_current_base_survives_too(
    tmp_path: Path, policy: CleanPolicy
) -> None:
    """Hudi's precondition, built by hand (lakewarden's planners plan only current slices,
    and ingestion into a pending non-cancellable plan's file groups is refused): a pending
    compaction reads a slice whose base file a later write superseded. Every clean policy
    would delete that slice (it is in no retained snapshot) but for the pending plan."""
    table = new_table(tmp_path / "t", table_type="mor", buckets=1, partition_by=[])
    first = table.write(rows("v0"), "upsert").instant
    table.write(rows("v1", range(0, 8, 2), ts=2), "upsert")  # a log file on that base
    old = table.snapshot().slices
    table.write(rows("v2", range(8, 9), ts=3), "insert")  # an append group beside it
    table.write(rows("v2", ts=3), "upsert")  # folds it: a new base, the old slice superseded
    assert set(table.snapshot().slices) == set(old)
    assert table.snapshot().slices != old
    compaction = WriteTransaction.begin(
        table.timeline_log,
        table.coordinator,
        table.table_id,
        operation="compact",
        actor="planner",
        action=Action.COMPACTION,
        plan=ServicePlan(file_groups=tuple(old), last_completed_instant=first),
    )
    planned = [path for file_slice in old.values() for path in file_slice.paths]
    assert any(".log." in p for p in planned)
    result = process(table, "cleaner").clean(policy, wall_clock=far_future)
    assert not {f.path for f in result.files} & set(planned)
    for path in planned:
        assert table.storage.exists(path), path
    assert compaction.status() is not None
