"""RFC-79 table services executed on Spark (``lakewarden.spark.run_table_service``): one Spark
task per file group, task attempts through the manifest committer, the driver's claim,
heartbeat and pre-commit decision. Clustering (through the CLI's ``--spark``) and merge-on-read
compaction complete without changing a read; a cancel request before the claim, while the
tasks run, or after they wrote their files ends the plan aborted with no file of it left."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _spark_helpers import files_on_disk, make_table, rows, sorted_rows, spark_df
from click.testing import CliRunner

import lakewarden.spark
from lakewarden.api.table import Table
from lakewarden.cli import cli
from lakewarden.errortable import error_table_location
from lakewarden.errortable.divert import SPOOL_DIR
from lakewarden.settings import ErrorTableSettings, Settings
from lakewarden.spark import _service
from lakewarden.spark._service_task import file_group_strategy
from lakewarden.table.config import CONFIG_KEY, describe_fields, encode_schema
from lakewarden.table.instant import Action, Transition
from lakewarden.table.plans import ServicePlan
from lakewarden.table.stats import CommitStats, FileGroupId
from lakewarden.tableservice import (
    PlanAlreadyExecutingError,
    PlanningInput,
    RewriteJob,
    ServiceOutcome,
    TableServiceStrategy,
    UnknownStrategyError,
)

pytestmark = pytest.mark.spark


def fragmented(spark: Any, path: Path) -> Table:
    """A table whose buckets are spread over the append groups of three Spark tasks."""
    table = make_table(path)
    spark_df(spark, rows(range(60)), partitions=3).write.format("lakewarden").mode("append").save(
        str(path)
    )
    table = Table.open(str(path), settings=Settings())  # the coordinator the executor uses
    assert len(table.snapshot().slices) > 4  # 2 regions x 2 buckets, several slices each
    return table


def state_of(table: Table, instant: str) -> Transition:
    found = table.state().get(instant)
    assert found is not None
    return found.state


def plan_files(root: Path, instant: str) -> set[str]:
    """Files of the plan's attempts anywhere under the table (data or committer staging)."""
    on_disk = files_on_disk(root)
    return {f for f in on_disk if instant in f}


def test_a_clustering_plan_runs_on_spark_from_the_cli_and_changes_no_read(
    spark: Any, table_dir: Path
) -> None:
    table = fragmented(spark, table_dir)
    expected = sorted_rows(table.read())
    instant = str(table.schedule_clustering(cancellable=True))

    # Another executor's heartbeat is alive: the Spark executor refuses, naming it.
    with table.coordinator.heartbeat(table.config.table_id, instant, "executor-elsewhere"):
        with pytest.raises(PlanAlreadyExecutingError) as refused:
            lakewarden.spark.run_table_service(spark, table.uri, instant)
    assert refused.value.owner == "executor-elsewhere"
    assert state_of(table, instant) is Transition.REQUESTED

    ran = CliRunner().invoke(cli, ["cluster", "run", table.uri, instant, "--spark"])
    assert ran.exit_code == 0, ran.output
    assert f"plan {instant}: completed" in ran.output
    assert state_of(table, instant) is Transition.COMPLETED
    slices = table.snapshot().slices.values()
    assert len(slices) == 4 and all(s.base_instant == instant for s in slices)
    assert sorted_rows(table.read()) == expected
    assert not any("_temporary" in f for f in files_on_disk(table_dir))  # job cleaned up
    assert spark.sparkContext._jsc is not None  # the CLI used this session and left it up


def test_a_cancel_request_before_during_or_after_the_spark_tasks_aborts_the_plan(
    spark: Any, table_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = fragmented(spark, table_dir)
    expected = sorted_rows(table.read())
    original = _service.SparkExecution.rewrite

    def cancel(instant: str, when: str) -> None:
        table.request_cancel(instant, requested_by="test", reason=f"cancelled {when}")

    # Before: the executor short-circuits at its claim; no Spark job runs.
    before = str(table.schedule_clustering(cancellable=True))
    cancel(before, "before")
    run = lakewarden.spark.run_table_service(spark, table.uri, before)
    assert run.outcome is ServiceOutcome.ABORTED and run.short_circuited

    # While the tasks run: every task finds the request and writes nothing.
    def cancelled_first(self: Any, *args: Any) -> CommitStats:
        cancel(self.instant, "during")
        stats = original(self, *args)
        assert not stats.write_stats  # every task short-circuited: nothing written or placed
        return stats

    monkeypatch.setattr(_service.SparkExecution, "rewrite", cancelled_first)
    during = str(table.schedule_clustering(cancellable=True))
    run = lakewarden.spark.run_table_service(spark, table.uri, during)
    assert run.outcome is ServiceOutcome.ABORTED and run.reason
    assert "during" in run.reason

    # After the job placed its files: the pre-commit deletes them and aborts.
    def cancelled_after(self: Any, *args: Any) -> CommitStats:
        stats = original(self, *args)
        assert stats.write_stats and all((table_dir / s.path).exists() for s in stats.write_stats)
        cancel(self.instant, "after")
        return stats

    monkeypatch.setattr(_service.SparkExecution, "rewrite", cancelled_after)
    after = str(table.schedule_clustering(cancellable=True))
    run = lakewarden.spark.run_table_service(spark, table.uri, after)
    assert run.outcome is ServiceOutcome.ABORTED and run.reason
    assert "after" in run.reason

    for instant in (before, during, after):
        assert state_of(table, instant) is Transition.ABORTED
        assert plan_files(table_dir, instant) == set()
    assert sorted_rows(table.read()) == expected


@pytest.mark.parametrize(
    "where", ["local", pytest.param("s3", marks=[pytest.mark.s3, pytest.mark.slow])]
)
def test_merge_on_read_compaction_runs_on_spark(
    spark: Any, table_dir: Path, where: str, request: pytest.FixtureRequest
) -> None:
    settings = Settings()
    uri = str(table_dir)
    if where == "s3":  # task attempts upload to final keys, held back until the job commit
        settings = request.getfixturevalue("s3_settings")
        uri = f"s3://{request.getfixturevalue('s3_bucket')}/svc/{table_dir.parent.name}"
    Table.create(
        uri,
        name="orders",
        record_key="id",
        schema=rows([]).schema,
        partition_by=["region"],
        ordering_field="ts",
        buckets=2,
        table_type="merge_on_read",
        settings=settings,
    )
    table = Table.open(uri, settings=settings)
    table.write(rows(range(40)), "upsert")
    table.write(rows(range(0, 40, 3), ts=2, note="v2"), "upsert")
    table.write(rows(range(1, 40, 7), ts=3), "delete")
    assert all(s.log_files for s in table.snapshot().slices.values())
    expected = sorted_rows(table.read())
    instant = str(table.schedule_compaction())

    run = lakewarden.spark.run_table_service(spark, uri, instant, settings=settings)

    assert run.outcome is ServiceOutcome.COMPLETED
    assert run.stats is not None and run.stats.operation == "compaction"
    slices = table.snapshot().slices.values()
    assert slices and all(not s.log_files and s.base_instant == instant for s in slices)
    assert sorted_rows(table.read()) == expected
    assert state_of(table, instant) is Transition.COMPLETED
    assert not [o.key for o in table.storage.list("") if o.key.startswith("_temporary/")]


def test_a_compaction_on_spark_sets_aside_what_the_evolved_schema_cannot_hold(
    spark: Any, table_dir: Path
) -> None:
    """``amount`` narrowed from double to long: the odd ids' values (``id * 1.5``) no longer
    fit. The tasks set them aside, the driver spools them for its attempt, and once the plan
    completed they are in the error table with the compaction instant, exactly once."""
    uri = str(table_dir)
    table = Table.create(
        uri,
        name="orders",
        record_key="id",
        schema=rows([]).schema,
        partition_by=["region"],
        ordering_field="ts",
        buckets=2,
        table_type="merge_on_read",
    )
    table = Table.open(uri, settings=Settings())
    table.write(rows(range(40)), "upsert")
    table.write(rows(range(0, 40, 2), ts=2, note="v2"), "upsert")
    assert all(s.log_files for s in table.snapshot().slices.values())
    narrowed = pa.schema(
        [
            pa.field("amount", pa.int64()) if f.name == "amount" else f
            for f in table.config.pa_schema
        ]
    )
    config = table.config.model_copy(
        update={"arrow_schema": encode_schema(narrowed), "fields": describe_fields(narrowed)}
    )
    table.storage.write(CONFIG_KEY, config.to_json())
    table = Table.open(uri, settings=Settings())
    instant = str(table.schedule_compaction(bad_records="error-table"))

    run = lakewarden.spark.run_table_service(spark, uri, instant)

    assert run.outcome is ServiceOutcome.COMPLETED
    assert run.stats is not None and run.stats.failed_records == 20
    assert [r["id"] for r in sorted_rows(table.read())] == list(range(0, 40, 2))
    location = error_table_location(uri, table.name, ErrorTableSettings())
    errors = Table.open(location.uri, coordinator=table.coordinator).read()
    records = [json.loads(r) for r in errors.column("record").to_pylist()]
    assert sorted(r["id"] for r in records) == list(range(1, 40, 2))
    assert set(errors.column("source_instant").to_pylist()) == {instant}
    assert not list(table.storage.list(SPOOL_DIR))


class _WholePlanOnly(TableServiceStrategy):
    """A strategy with no per-file-group entry point."""

    name = "test.whole-plan-only"
    action = Action.CLUSTERING

    def plan(self, source: PlanningInput) -> ServicePlan | None:
        return None

    def rewrite(self, job: RewriteJob) -> CommitStats:
        raise AssertionError("never run")


def test_a_strategy_without_file_group_units_is_refused_on_spark_by_name() -> None:
    group = FileGroupId(partition_path="eu", file_id="00000000-0000")
    plan = ServicePlan(file_groups=(group,), strategy=_WholePlanOnly.name)
    with pytest.raises(UnknownStrategyError, match="no per-file-group entry point"):
        file_group_strategy(_WholePlanOnly(), plan, table="t", instant="1")
