"""Clustering: scheduling (what a plan names) and in-process execution (a replace that keeps
every record), on memory, local and S3 storage."""

from __future__ import annotations

import pytest
from conftest import MakeTable
from service_tables import append, as_sorted, fragmented, rows

from lakewarden.table.instant import Action, Transition
from lakewarden.table.plans import ServicePlan
from lakewarden.tableservice import (
    InstantAlreadyCompletedError,
    InvalidPlanOptionsError,
    NotATableServicePlanError,
    ServiceOutcome,
    UnknownPlanError,
)


def test_nothing_to_cluster_schedules_nothing(make_table: MakeTable) -> None:
    table = make_table()
    assert table.schedule_clustering() is None  # empty table
    table.write(rows((1, "eu", 1, "a"), (2, "us", 1, "b")))
    assert table.schedule_clustering() is None  # one slice per bucket
    assert table.timeline()[-1].action is Action.COMMIT


def test_plan_names_its_input_slices_policy_and_last_completed_instant(
    make_table: MakeTable,
) -> None:
    table = make_table()
    fragmented(table)
    before = table.snapshot()
    instant = table.schedule_clustering(
        cancellable=True, cancellation_policy={"max_age_s": 7200}, sort_by=["ts"]
    )
    assert instant is not None
    mine = table.state().get(instant)
    assert mine is not None and mine.state is Transition.REQUESTED and mine.cancellable
    plan = mine.plan
    assert isinstance(plan, ServicePlan)
    assert plan.strategy == "clustering.bucket"
    assert plan.cancellation_policy is not None and plan.cancellation_policy.max_age_s == 7200
    assert plan.last_completed_instant == before.as_of
    assert plan.sort_by == ("ts",)
    # Every slice of the snapshot is an input (3 tasks x 2 regions x 2 buckets), and the
    # paths are exactly the snapshot's files.
    assert set(plan.file_groups) == set(before.slices)
    assert sorted(plan.input_paths()) == sorted(p for s in before.slices.values() for p in s.paths)
    # Planned groups are busy: a second plan finds nothing left.
    assert table.schedule_clustering() is None


def test_plan_options_are_checked(make_table: MakeTable) -> None:
    table = make_table()
    fragmented(table)
    with pytest.raises(InvalidPlanOptionsError, match="cancellable"):
        table.schedule_clustering(cancellation_policy={"max_age_s": 60})
    with pytest.raises(InvalidPlanOptionsError, match="nope"):
        table.schedule_clustering(sort_by=["nope"])
    with pytest.raises(InvalidPlanOptionsError, match="at least 1"):
        table.schedule_clustering(max_file_groups=0)
    assert [i.action for i in table.timeline()] == [Action.COMMIT]  # nothing appended


def test_partitions_and_max_file_groups_limit_the_plan(make_table: MakeTable) -> None:
    table = make_table()
    fragmented(table)
    instant = table.schedule_clustering(partitions=["region=eu"], max_file_groups=4)
    assert instant is not None
    plan = table.state().get(instant)
    assert plan is not None
    groups = plan.plan_file_groups
    assert {g.partition_path for g in groups} == {"region=eu"}
    assert 0 < len(groups) <= 4


def test_clustering_rewrites_each_bucket_into_one_file_and_keeps_every_record(
    make_any_table: MakeTable,
) -> None:
    table = make_any_table()
    appended = fragmented(table)
    before = table.read()
    instant = table.schedule_clustering(sort_by=["ts"])
    assert instant is not None
    run = table.run_table_service(instant)
    assert run.outcome is ServiceOutcome.COMPLETED
    mine = table.state().get(instant)
    assert mine is not None and mine.state is Transition.COMPLETED
    after = table.snapshot()
    assert len(after.slices) == 4  # 2 regions x 2 buckets, one canonical group each
    assert all(g.file_id.endswith("-0000") for g in after.slices)
    assert as_sorted(table.read()) == as_sorted(before) == as_sorted(appended)
    # The rewritten files keep each record's commit time (incremental reads still date it).
    times = set(table.read(with_meta=True).column("_lw_commit_time").to_pylist())
    assert times == {table.timeline()[0].instant}
    with pytest.raises(InstantAlreadyCompletedError):
        table.run_table_service(instant)


def test_writes_after_clustering_merge_into_the_clustered_bucket(make_table: MakeTable) -> None:
    table = make_table()
    fragmented(table)
    instant = table.schedule_clustering()
    assert instant is not None
    table.run_table_service(instant)
    table.write(rows((1, "eu", 99, "new")))
    result = {r["id"]: r["v"] for r in table.read().to_pylist()}
    assert result[1] == "new" and len(result) == 24


def test_run_of_an_unknown_or_non_plan_instant_is_a_named_error(make_table: MakeTable) -> None:
    table = make_table()
    commit = table.write(rows((1, "eu", 1, "a"))).instant
    with pytest.raises(UnknownPlanError):
        table.run_table_service("20990101000000000")
    with pytest.raises(NotATableServicePlanError):
        table.run_table_service(commit)
    # An append that is still pending is no plan either.
    pending = append(table, rows((5, "eu", 1, "x")), complete=False)
    with pytest.raises(NotATableServicePlanError):
        table.run_table_service(pending.instant)
