"""Checkpoints are never trusted blindly: digests of their state and of the last entry they
summarise, and the state must show that entry.

Regression tests for issue 17's "checkpoints are trusted blindly": a forged checkpoint with the
right tail but no instants made reads drop completed instants.
"""

from __future__ import annotations

import pytest
from _hypothesis_profiles import examples
from _memstore import MemStorage
from hypothesis import given, settings
from hypothesis import strategies as st

from lakewarden.storage import Storage
from lakewarden.table.checkpoint import (
    CheckpointStore,
    checkpoint_key,
    encode_checkpoint,
    entry_key,
)
from lakewarden.table.instant import Action, Instant, Transition
from lakewarden.table.timeline import EntryDraft, Timeline, TimelineState


def fill(timeline: Timeline, n: int, *, op: str = "op") -> None:
    for i in range(n):
        timeline.append(
            lambda state, i=i: EntryDraft(
                instant=str(Instant.next_after(state.last_requested())),
                action=Action.COMMIT,
                transition=Transition.REQUESTED,
                actor="w",
                lock_token=None,
                wall_time_ms=0,
                payload={"operation": f"{op}{i}", "cancellable": False, "plan": None},
            )
        )


def twelve_entries(op: str = "op") -> MemStorage:
    storage = MemStorage()
    fill(Timeline(storage, checkpoint_interval=5), 12, op=op)  # checkpoints at 4 and 9
    return storage


def loads_correctly(storage: Storage) -> bool:
    return Timeline(storage).load() == Timeline(storage).load(full_replay=True)


def test_a_fresh_checkpoint_is_used() -> None:
    storage = twelve_entries()
    state = CheckpointStore(storage, interval=5).newest()
    assert state is not None and state.tail_seq == 9
    assert loads_correctly(storage)


def test_forged_checkpoint_with_right_tail_but_no_instants_is_not_used(
    caplog: pytest.LogCaptureFixture,
) -> None:
    storage = twelve_entries()
    forged = encode_checkpoint(TimelineState(tail_seq=9), storage.read(entry_key(9)))
    storage.write(checkpoint_key(9), forged)  # both digests right, the state empty
    assert loads_correctly(storage)
    assert "does not show entry 9" in caplog.text
    assert len(Timeline(storage).load().instants) == 12


def test_old_checkpoint_without_digest_is_ignored_with_a_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    storage = twelve_entries()
    storage.write(checkpoint_key(9), b'{"format_version": 1, "state": {"tail_seq": 9}}')
    storage.write(checkpoint_key(4), b'{"format_version": 1, "state": {"tail_seq": 4}}')
    assert CheckpointStore(storage, interval=5).newest() is None  # replay from entry 0
    assert loads_correctly(storage)
    assert "carries no digest (format 1, or truncated): not trusted" in caplog.text


def test_checkpoint_whose_state_was_edited_is_not_used(caplog: pytest.LogCaptureFixture) -> None:
    storage = twelve_entries()
    data = storage.read(checkpoint_key(9))
    storage.write(checkpoint_key(9), data.replace(b'"op3"', b'"op9"'))  # still parses
    assert loads_correctly(storage)
    assert "does not match the state digest" in caplog.text


def test_checkpoint_of_another_log_is_not_used(caplog: pytest.LogCaptureFixture) -> None:
    storage = twelve_entries()
    other = twelve_entries("other")  # another log with the same shape
    storage.write(checkpoint_key(9), other.read(checkpoint_key(9)))
    assert loads_correctly(storage)
    assert "entry 9 does not match the checkpoint's digest of it" in caplog.text


def test_checkpoint_whose_last_entry_is_missing_is_not_used() -> None:
    storage = twelve_entries()
    storage.delete(entry_key(9))
    storage.delete(entry_key(10))
    storage.delete(entry_key(11))
    assert CheckpointStore(storage, interval=5).newest() is not None  # the one at 4
    assert Timeline(storage).load().tail_seq == 8


def test_checkpoint_ending_in_a_rejected_entry_is_used() -> None:
    storage = MemStorage()
    fill(Timeline(storage), 4)
    first = Timeline(storage).load().pending()[0]
    bad = EntryDraft(
        instant=first.instant,
        action=Action.COMMIT,
        transition=Transition.COMPLETED,  # from requested: illegal, ignored
        actor="x",
        lock_token=None,
        wall_time_ms=0,
    ).at(4)
    storage.write_if_absent(entry_key(4), bad.model_dump_json().encode())
    assert CheckpointStore(storage, interval=5).write(Timeline(storage).load())
    state = CheckpointStore(storage, interval=5).newest()
    assert state is not None and [r.seq for r in state.rejected] == [4]


@settings(max_examples=examples(60))
@given(data=st.data())
def test_a_mutated_checkpoint_never_changes_what_a_read_returns(data: st.DataObject) -> None:
    """Bit flips, truncation or a replaced byte anywhere in a checkpoint: the loader uses it
    only if it is still right, so a load always equals the full replay (never a crash)."""
    storage = twelve_entries()
    raw = bytearray(storage.read(checkpoint_key(9)))
    kind = data.draw(st.sampled_from(["flip", "truncate", "byte"]))
    at = data.draw(st.integers(0, len(raw) - 1))
    if kind == "flip":
        raw[at] ^= 1 << data.draw(st.integers(0, 7))
    elif kind == "truncate":
        del raw[at:]
    else:
        raw[at] = data.draw(st.integers(0, 255))
    storage.write(checkpoint_key(9), bytes(raw))
    assert loads_correctly(storage)
