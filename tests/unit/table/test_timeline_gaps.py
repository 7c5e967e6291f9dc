"""A missing timeline entry with later ones present (a gap) stops reads and writes loudly;
``lakewarden timeline repair`` reports gaps and marks them lost explicitly.

Regression tests for issue 17's "a missing timeline entry loses committed data silently":
with entry 4 of 12 deleted, a reader returned the state as of entry 3 and the next write was
accepted into the gap at seq 4.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from _memstore import MemStorage
from click.testing import CliRunner

from lakewarden.api.table import Table
from lakewarden.cli import cli
from lakewarden.storage import Storage
from lakewarden.storage.local import LocalStorage
from lakewarden.table.checkpoint import entry_key
from lakewarden.table.instant import Action, Instant, Transition
from lakewarden.table.timeline import EntryDraft, Timeline, TimelineGapError, TimelineState
from lakewarden.table.timeline_gaps import REPAIR_COMMAND, TimelineCorruptError, find_gaps


@pytest.fixture(params=["mem", "local"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    return MemStorage() if request.param == "mem" else LocalStorage(str(tmp_path / "t"))


def requested(op: str) -> Callable[[TimelineState], EntryDraft]:
    def build(state: TimelineState) -> EntryDraft:
        return EntryDraft(
            instant=str(Instant.next_after(state.last_requested())),
            action=Action.COMMIT,
            transition=Transition.REQUESTED,
            actor="w",
            lock_token=None,
            wall_time_ms=0,
            payload={"operation": op, "cancellable": False, "plan": None},
        )

    return build


def fill(timeline: Timeline, n: int) -> None:
    for i in range(n):
        timeline.append(requested(f"op{i}"))


def test_missing_timeline_entry_fails_reads_and_writes_loudly(storage: Storage) -> None:
    fill(Timeline(storage), 12)
    storage.delete(entry_key(4))

    with pytest.raises(TimelineGapError, match="entry 4 is missing but entry 5 exists") as err:
        Timeline(storage).load()
    assert (err.value.missing_seq, err.value.next_seq) == (4, 5)
    assert isinstance(err.value, TimelineCorruptError)
    assert REPAIR_COMMAND in str(err.value) and "Help:" in str(err.value)
    with pytest.raises(TimelineGapError):
        Timeline(storage).append(requested("into-the-gap"))
    # a writer never appends below an existing entry
    assert not storage.exists(entry_key(4)) and not storage.exists(entry_key(12))


def test_missing_timeline_entry_is_seen_by_a_reader_that_cached_the_prefix(
    storage: Storage,
) -> None:
    reader = Timeline(storage)
    fill(reader, 3)
    assert reader.load().tail_seq == 2
    fill(Timeline(storage), 5)
    storage.delete(entry_key(3))
    storage.delete(entry_key(4))  # a gap of two entries
    with pytest.raises(TimelineGapError, match="entry 3 is missing but entry 5 exists"):
        reader.load()
    with pytest.raises(TimelineGapError):
        reader.append(requested("late"))


def test_missing_last_entries_are_not_a_gap(storage: Storage) -> None:
    """Nothing after the hole: that is simply the end (as if the appends never happened)."""
    fill(Timeline(storage), 3)
    storage.delete(entry_key(2))
    assert Timeline(storage).load().tail_seq == 1
    assert find_gaps(storage) == ([], 1)


@pytest.fixture
def table_uri(tmp_path: Path) -> str:
    uri = str(tmp_path / "orders")
    Table.create(uri, name="orders", record_key="id", schema=pa.schema([("id", pa.int64())]))
    return uri


def test_timeline_repair_reports_gaps_then_marks_them_lost(table_uri: str) -> None:
    storage = LocalStorage(table_uri)
    fill(Timeline(storage), 8)
    storage.delete(entry_key(2))
    storage.delete(entry_key(3))
    storage.delete(entry_key(5))

    report = CliRunner().invoke(cli, ["timeline", "repair", table_uri])
    assert report.exit_code == 1, report.output
    assert "entries missing below entry 7: 2-3, 5" in report.output
    assert not storage.exists(entry_key(2))  # a report changes nothing

    fixed = CliRunner().invoke(cli, ["timeline", "repair", table_uri, "--fill-gaps"])
    assert fixed.exit_code == 0, fixed.output
    assert "marked 3 entries lost: 2-3, 5" in fixed.output
    assert "seq 2 ignored: entry lost and marked so by `lakewarden timeline repair`" in (
        fixed.output
    )

    state = Timeline(storage).load()
    assert state.tail_seq == 7 and state == Timeline(storage).load(full_replay=True)
    assert [r.seq for r in state.rejected] == [2, 3, 5]
    assert sorted(i.operation or "" for i in state.instants.values()) == [
        "op0",
        "op1",
        "op4",
        "op6",
        "op7",
    ]
    Timeline(storage).append(requested("after-repair"))  # writes work again, at the tail
    assert storage.exists(entry_key(8))

    again = CliRunner().invoke(cli, ["timeline", "repair", table_uri])
    assert again.exit_code == 0 and "9 entries, no gap" in again.output
