"""explain's read window: from a lead before the instant to a trail after its terminal entry."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lakewarden.api.table import Table
from lakewarden.history import (
    EXPLAIN_LEAD_MS,
    EXPLAIN_TRAIL_MS,
    ReadWindow,
    explain_window,
    terminal_time_ms,
)
from lakewarden.storage import open_storage
from lakewarden.table.checkpoint import entry_key
from lakewarden.table.instant import Action, Instant, Transition
from lakewarden.table.timeline_state import EntryDraft

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False)])
INSTANT = "20250314092653589"


def test_the_window_runs_from_the_lead_before_the_instant_to_the_trail_after_its_end() -> None:
    start = Instant.parse(INSTANT).epoch_ms

    assert explain_window(INSTANT, start + 5_000) == ReadWindow(
        start - EXPLAIN_LEAD_MS, start + 5_000 + EXPLAIN_TRAIL_MS
    )
    # Pending (or unknown): to the end of the topics.
    assert explain_window(INSTANT, None) == ReadWindow(start - EXPLAIN_LEAD_MS, None)
    # An appender's clock behind the instant's: the window never ends before the instant.
    assert explain_window(INSTANT, start - 60_000).until_ms == start + EXPLAIN_TRAIL_MS


@pytest.fixture
def table(tmp_path: Path) -> Table:
    created = Table.create(str(tmp_path / "t"), name="t", record_key="id", schema=SCHEMA)
    created.write(pa.table({"id": [1]}, schema=SCHEMA), operation="insert")
    return created


def test_the_terminal_time_is_the_terminal_entrys_and_none_while_pending(table: Table) -> None:
    (done,) = table.timeline_log.load().instants.values()
    completed = next(e for e in table.timeline_log.entries() if e.seq == done.last_seq)
    pending = str(Instant.from_epoch_ms(Instant.parse(done.instant).epoch_ms + 1_000))
    table.timeline_log.append(
        EntryDraft(
            instant=pending,
            action=Action.COMMIT,
            transition=Transition.REQUESTED,
            actor="writer",
            lock_token=None,
            wall_time_ms=1,
            payload={"operation": "insert"},
        )
    )

    assert completed.transition is Transition.COMPLETED
    assert terminal_time_ms(table.storage, done.instant) == completed.wall_time_ms
    assert terminal_time_ms(table.storage, pending) is None
    assert terminal_time_ms(table.storage, "20990101000000000") is None


def test_a_timeline_that_cannot_be_read_means_reading_to_the_end(
    table: Table, tmp_path: Path
) -> None:
    (done,) = table.timeline_log.load().instants.values()
    table.storage.write(entry_key(done.last_seq), b"{not json")

    assert terminal_time_ms(open_storage(str(tmp_path / "t")), done.instant) is None
    assert terminal_time_ms(open_storage(str(tmp_path / "empty")), done.instant) is None
