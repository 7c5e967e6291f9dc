"""``lakewarden cluster schedule|run`` and ``lakewarden cancel`` in-process (no Kafka)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from service_tables import SCHEMA, as_sorted, fragmented

from lakewarden.api.table import Table
from lakewarden.cli import cli
from lakewarden.table.instant import Transition


@pytest.fixture
def table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Table:
    monkeypatch.delenv("LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS", raising=False)
    t = Table.create(
        str(tmp_path / "orders"),
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        buckets=2,
    )
    fragmented(t)
    return t


def _instant(output: str) -> str:
    found = re.search(r"\d{17}", output)
    assert found is not None, output
    return found.group(0)


def test_schedule_and_run_a_clustering_plan(table: Table) -> None:
    before = as_sorted(table.read())
    scheduled = CliRunner().invoke(
        cli, ["cluster", "schedule", table.uri, "--cancellable", "--max-age", "2h"]
    )
    assert scheduled.exit_code == 0, scheduled.output
    assert "scheduled cancellable clustering" in scheduled.output
    instant = _instant(scheduled.output)
    plan = table.state().get(instant)
    assert plan is not None and plan.cancellable
    ran = CliRunner().invoke(cli, ["cluster", "run", table.uri, instant])
    assert ran.exit_code == 0, ran.output
    assert f"plan {instant}: completed" in ran.output
    assert as_sorted(table.read()) == before
    again = CliRunner().invoke(cli, ["cluster", "schedule", table.uri])
    assert "nothing to cluster" in again.output


def test_cancel_then_execute_in_process(table: Table) -> None:
    instant = str(table.schedule_clustering(cancellable=True))
    asked = CliRunner().invoke(cli, ["cancel", table.uri, instant, "--reason", "reindex"])
    assert asked.exit_code == 0 and f"plan {instant}: requested" in asked.output
    done = CliRunner().invoke(cli, ["cancel", table.uri, instant, "--execute"])
    assert done.exit_code == 0 and f"plan {instant}: aborted" in done.output
    mine = table.state().get(instant)
    assert mine is not None and mine.state is Transition.ABORTED
    fixed = str(table.schedule_clustering())
    refused = CliRunner().invoke(cli, ["cancel", table.uri, fixed])
    assert refused.exit_code == 1 and "cancellable=true" in refused.stderr
