"""apache/hudi#4163 (HUDI-2892): a clustering plan stayed pending while archival and cleaning
went on; finishing it later "stained" the timeline and queries returned incomplete results,
because what the plan had read was no longer what the table held.

Here a pending plan's inputs cannot move under it:

- clean never deletes a file a pending plan reads (``ServicePlan.input_paths``), whatever the
  policy;
- nothing can supersede them while it is pending: an ingestion on its file groups is refused
  for a non-cancellable plan (``PendingPlanConflict``) and, for a cancellable one, wins and
  cancels the plan (RFC-79), which can then never complete (``cancel_requested`` is
  irrevocable) and is aborted by the clean;

so a plan that completes late replaces exactly the slices it read, and the table reads every
record once. (There is no archival yet: the timeline keeps every instant.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "tableservice"))
from service_tables import SCHEMA, as_sorted, fragmented, rows  # noqa: E402

from lakewarden.api.table import Table  # noqa: E402
from lakewarden.table import CleanPolicy  # noqa: E402
from lakewarden.table.conflicts import PendingPlanConflict  # noqa: E402
from lakewarden.table.instant import Transition  # noqa: E402
from lakewarden.table.plans import ServicePlan  # noqa: E402
from lakewarden.tableservice import ServiceOutcome  # noqa: E402

AGGRESSIVE = CleanPolicy(commits_retained=1, retention_window_s=0)


def _table(root: Path) -> Table:
    return Table.create(
        str(root / "orders"),
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        ordering_field="ts",
        buckets=2,
    )


def _inputs(table: Table, instant: str) -> tuple[str, ...]:
    plan = table.state().get(instant)
    assert plan is not None and isinstance(plan.plan, ServicePlan)
    return plan.plan.input_paths()


def test_hudi_4163_a_late_clustering_replaces_exactly_what_it_read(tmp_path: Path) -> None:
    table = _table(tmp_path)
    fragmented(table)
    expected = as_sorted(table.read())
    instant = str(table.schedule_clustering(cancellable=False))
    inputs = _inputs(table, instant)
    with pytest.raises(PendingPlanConflict):  # nothing supersedes the plan's inputs
        table.write(rows((1, "eu", 9, "late")), "upsert")
    for _ in range(3):
        table.clean(AGGRESSIVE)
    assert [p for p in inputs if not table.storage.exists(p)] == []
    assert table.run_table_service(instant).outcome is ServiceOutcome.COMPLETED
    assert as_sorted(table.read()) == expected


def test_hudi_4163_a_cancelled_clustering_never_completes_after_its_inputs_go(
    tmp_path: Path,
) -> None:
    table = _table(tmp_path)
    fragmented(table)
    instant = str(table.schedule_clustering(cancellable=True))
    table.write(rows((1, "eu", 9, "late")), "upsert")  # the ingestion wins, cancels the plan
    expected = as_sorted(table.read())
    table.clean(AGGRESSIVE)  # aborts the plan (no executor claims it), then cleans
    mine = table.state().get(instant)
    assert mine is not None and mine.state is Transition.ABORTED
    assert table.run_table_service(instant).outcome is ServiceOutcome.ALREADY_ABORTED
    assert as_sorted(table.read()) == expected
