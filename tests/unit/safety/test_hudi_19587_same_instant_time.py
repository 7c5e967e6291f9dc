"""apache/hudi#19587: two writers got the same instant time (each generated it from its own
clock, and each created its instant's files), so their commits collided on one instant.

Here an instant time is generated while the log is read, as max(now, last requested + 1 ms),
and its ``requested`` entry is created only if absent at tail + 1; the state machine rejects
a ``requested`` whose instant is not after every earlier one. Two processes (no shared lock)
whose clocks read exactly the same millisecond therefore get two instants: the loser of the
race for the tail re-reads the log and takes the next millisecond. A zombie that appends a
``requested`` with a used instant time, skipping every check, is ignored by every reader."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from _readers_safety import Interleave, new_table, process, rows

from lakewarden.storage.local import LocalStorage
from lakewarden.table import instant as instant_module
from lakewarden.table.checkpoint import entry_key
from lakewarden.table.instant import Action, Transition
from lakewarden.table.timeline import IllegalTransitionError, Timeline
from lakewarden.table.timeline_state import EntryDraft
from lakewarden.table.transaction import WriteTransaction


def test_hudi_19587_two_writers_on_one_clock_millisecond_get_two_instants(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = new_table(tmp_path / "t")
    frozen = time.time_ns()  # both processes' clocks read this very millisecond
    monkeypatch.setattr(instant_module, "_time", SimpleNamespace(time_ns=lambda: frozen))
    raced = Interleave(LocalStorage(tmp_path / "t"))
    second = process(first, "writer-2", raced)
    other: list[str] = []
    # The second writer has read the log and drafted its instant; the first appends its own
    # requested entry (same clock, same instant time) before the second writes.
    raced.before(
        "write_if_absent",
        lambda key: key.startswith(".lakewarden/timeline/"),
        lambda: other.append(first.write(rows("first")).instant),
    )
    mine = second.write(rows("second", range(8, 16))).instant
    assert raced.fired and other
    assert mine != other[0] and mine > other[0]  # the loser took the next millisecond
    requested = [s.instant for s in second.timeline()]
    assert requested == sorted(set(requested))
    assert all(s.state is Transition.COMPLETED for s in second.timeline())
    assert sorted(second.read().column("v").to_pylist()) == ["first"] * 8 + ["second"] * 8


def test_hudi_19587_a_requested_entry_reusing_an_instant_time_is_rejected(
    tmp_path: Path,
) -> None:
    table = new_table(tmp_path / "t")
    used = table.write(rows("v0")).instant
    duplicate = EntryDraft(
        instant=used,
        action=Action.COMMIT,
        transition=Transition.REQUESTED,
        actor="zombie",
        lock_token=None,
        wall_time_ms=0,
        payload={"operation": "upsert", "cancellable": False, "plan": None},
    )
    with pytest.raises(IllegalTransitionError):
        table.timeline_log.append(lambda _state: duplicate)
    # Written raw at the tail, skipping every check: every reader ignores it.
    tail = table.state().tail_seq
    table.storage.write_if_absent(
        entry_key(tail + 1), duplicate.at(tail + 1).model_dump_json().encode()
    )
    state = Timeline(table.storage).load(full_replay=True)
    assert [r.seq for r in state.rejected] == [tail + 1]
    kept = state.get(used)
    assert kept is not None and kept.state is Transition.COMPLETED
    txn = WriteTransaction.begin(
        table.timeline_log, table.coordinator, table.table_id, operation="upsert", actor="w"
    )
    assert txn.instant > used
