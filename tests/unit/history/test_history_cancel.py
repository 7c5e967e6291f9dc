"""explain of a plan aborted through RFC-79's request_cancel and execute_cancel (the real
table-service code): the announced timeline entries alone name who asked to cancel and why."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from _events import event

from lakewarden.api.table import Table
from lakewarden.clients.timeline_events import transition_record
from lakewarden.history import Recorded, build_history, explain, fmt_ms
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.timeline_state import TimelineEntry

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


class _Announced(EmbeddedCoordinator):
    """The in-process lock, keeping every announced entry (what the Kafka coordinator
    publishes on the timeline topic)."""

    def __init__(self) -> None:
        super().__init__()
        self.entries: list[TimelineEntry] = []

    def announce(self, table_id: str, entry: TimelineEntry) -> None:
        self.entries.append(entry)


def _events(table_id: str, entries: list[TimelineEntry]) -> list[Recorded]:
    return [
        event(
            "TimelineTransition",
            entry.seq,
            **{k: v for k, v in record.items() if k != "envelope"},
            table=table_id,
            producer=entry.actor,
        )
        for entry in entries
        for record in [transition_record(entry, table_id=table_id, producer_id=entry.actor)]
    ]


def test_an_aborted_plan_is_explained_by_the_cancel_request_who_and_why(tmp_path: Path) -> None:
    coordinator = _Announced()
    table = Table.create(
        str(tmp_path / "t"), name="t", record_key="id", schema=SCHEMA, coordinator=coordinator
    )
    table.write(pa.table({"id": [1, 2], "v": ["b", "a"]}, schema=SCHEMA), operation="insert")
    plan = table.schedule_clustering(cancellable=True, sort_by=["v"])
    assert plan is not None
    table.request_cancel(plan, requested_by="ops-alice", reason="reindex tonight")
    table.execute_cancel(plan)

    history = build_history(table.table_id, _events(table.table_id, coordinator.entries))
    text = "\n".join(explain(history, str(plan)))

    cancel = next(e for e in coordinator.entries if e.transition == "cancel_requested")
    assert f"Instant {plan} (clustering) is aborted" in text
    assert (
        f"Aborted because cancel was requested by ops-alice at {fmt_ms(cancel.wall_time_ms)} "
        "for reason: reindex tonight."
    ) in text
    assert "Aborted by " in text
