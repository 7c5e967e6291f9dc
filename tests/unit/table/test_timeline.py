"""The timeline log: append, load, checkpoints, rebase, lost replies, racing appenders."""

from __future__ import annotations

import gc
import importlib.util
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from _memstore import MemStorage

from lakewarden.errors import CommitStateUnknownError
from lakewarden.storage import Storage, StorageIOError
from lakewarden.storage.faults import FaultyStorage
from lakewarden.table.checkpoint import CHECKPOINT_PREFIX, checkpoint_key, entry_key, gc_paused
from lakewarden.table.instant import Action, Instant, Transition
from lakewarden.table.timeline import (
    ConcurrentAppendError,
    EntryDraft,
    IllegalTransitionError,
    Timeline,
    TimelineCorruptError,
    TimelineState,
)

HAVE_LOCAL = importlib.util.find_spec("lakewarden.storage.local") is not None


@pytest.fixture(params=["mem", "local"] if HAVE_LOCAL else ["mem"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    if request.param == "mem":
        return MemStorage()
    from lakewarden.storage.local import LocalStorage

    return LocalStorage(str(tmp_path / "table"))


def requested(actor: str = "w", *, op: str = "insert") -> Callable[[TimelineState], EntryDraft]:
    """A factory: a requested commit after the last requested instant."""

    def build(state: TimelineState) -> EntryDraft:
        return EntryDraft(
            instant=str(Instant.next_after(state.last_requested())),
            action=Action.COMMIT,
            transition=Transition.REQUESTED,
            actor=actor,
            lock_token=None,
            wall_time_ms=0,
            payload={"operation": op, "cancellable": False, "plan": None},
        )

    return build


def fill(timeline: Timeline, n: int) -> None:
    for i in range(n):
        timeline.append(requested(op=f"op{i}"))


def test_append_then_load_from_a_fresh_reader(storage: Storage) -> None:
    writer = Timeline(storage)
    entry, state = writer.append(requested("alice"))
    assert entry.seq == 0 and state.tail_seq == 0
    assert storage.exists(entry_key(0))
    fill(writer, 4)
    loaded = Timeline(storage).load()
    assert loaded == writer.load() == Timeline(storage).load(full_replay=True)
    assert loaded.tail_seq == 4 and len(loaded.instants) == 5
    assert [i.operation for i in loaded.pending()] == ["insert", "op0", "op1", "op2", "op3"]
    assert [e.seq for e in Timeline(storage).entries(after_seq=2)] == [3, 4]
    assert loaded.rejected == ()


def test_empty_timeline() -> None:
    state = Timeline(MemStorage()).load()
    assert state == TimelineState() and state.tail_seq == -1 and state.last_requested() is None


def test_checkpoints_every_k_entries_and_load_uses_the_newest(storage: Storage) -> None:
    fill(Timeline(storage, checkpoint_interval=5), 12)
    keys = [info.key for info in storage.list(CHECKPOINT_PREFIX)]
    assert keys == [checkpoint_key(4), checkpoint_key(9)]
    counting = MemStorage()
    for key in (info.key for info in storage.list("")):
        counting.write(key, storage.read(key))
    state = Timeline(counting, checkpoint_interval=5).load()
    assert state == Timeline(storage).load(full_replay=True)
    # the checkpoint of seq 9 (and entry 9, to cross-check it), then entries 10 and 11 by
    # key; the miss at 12 is confirmed as the end by one listing after it
    assert counting.reads == [checkpoint_key(9), entry_key(9), entry_key(10), entry_key(11)]
    assert counting.calls["list"] == 2  # of the checkpoints, and after entry 12


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda s: s.write(checkpoint_key(9), b"{not json"), id="corrupt-json"),
        pytest.param(
            lambda s: s.write(checkpoint_key(9), b'{"state": {"tail_seq": 3}}'), id="wrong-seq"
        ),
        pytest.param(lambda s: s.delete(checkpoint_key(9)), id="missing"),
    ],
)
def test_a_bad_checkpoint_falls_back(
    damage: Callable[[Storage], None], storage: Storage, caplog: pytest.LogCaptureFixture
) -> None:
    fill(Timeline(storage, checkpoint_interval=5), 12)
    damage(storage)
    assert Timeline(storage).load() == Timeline(storage).load(full_replay=True)
    # and with every checkpoint damaged: full replay
    storage.write(checkpoint_key(4), b"\x00garbage")
    assert Timeline(storage).load() == Timeline(storage).load(full_replay=True)
    assert "unusable, trying an older one" in caplog.text


def test_gc_paused_restores_the_collector() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() == 0
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # the application's choice is kept
    finally:
        gc.enable()
    keep = [[i] for i in range(10)]
    gc.freeze()  # an application that froze objects (pre-fork): left frozen
    try:
        with gc_paused():
            pass
        assert gc.get_freeze_count() > 0 and gc.isenabled()
    finally:
        gc.unfreeze()
    assert keep


def test_racing_checkpoint_writers_do_not_clobber(storage: Storage) -> None:
    timeline = Timeline(storage, checkpoint_interval=5)
    fill(timeline, 5)
    before = storage.read(checkpoint_key(4))
    assert timeline.checkpoints.write(timeline.load()) is False  # exists: left alone
    assert storage.read(checkpoint_key(4)) == before


def test_lost_race_rebases_and_regenerates_the_draft() -> None:
    storage = MemStorage()
    faulty = FaultyStorage(storage)  # ours goes through it; theirs writes to the store itself
    ours, theirs = Timeline(faulty), Timeline(storage)
    fill(ours, 2)
    seen: list[int] = []
    validated: list[int] = []

    def factory(state: TimelineState) -> EntryDraft:
        seen.append(state.tail_seq)
        return requested("ours")(state)

    # theirs appends between our read of the tail and our write
    faulty.before("write_if_absent", lambda: theirs.append(requested("theirs")))
    entry, state = ours.append(factory, validate=lambda s, d: validated.append(s.tail_seq))
    assert seen == validated == [1, 2]
    assert entry.seq == 3 and entry.actor == "ours" and state.tail_seq == 3
    instants = [i.instant for i in state.pending()]
    assert instants == sorted(instants) and len(set(instants)) == 4
    assert state.rejected == ()


def test_validation_error_stops_the_append() -> None:
    storage = MemStorage()

    class Nope(Exception):
        pass

    def refuse(state: TimelineState, draft: EntryDraft) -> None:
        raise Nope("conflict")

    with pytest.raises(Nope):
        Timeline(storage).append(requested(), validate=refuse)
    assert list(storage.list("")) == []


def test_illegal_entry_is_refused_before_writing() -> None:
    storage = MemStorage()
    timeline = Timeline(storage, table="t1")
    entry, _ = timeline.append(requested())
    done = entry.model_copy(update={"transition": Transition.COMPLETED, "payload": {}})
    draft = EntryDraft(**done.model_dump(exclude={"seq"}))
    with pytest.raises(IllegalTransitionError, match="completes only from inflight") as info:
        timeline.append(draft)
    assert info.value.instant == entry.instant and info.value.table == "t1"
    assert [e.seq for e in timeline.entries()] == [0]


def test_bounded_attempts_then_concurrent_append_error() -> None:
    storage = MemStorage()
    faulty = FaultyStorage(storage)
    ours, theirs = Timeline(faulty, max_append_attempts=3), Timeline(storage)

    def always_first() -> None:
        theirs.append(requested("theirs"))
        faulty.before("write_if_absent", always_first)  # and before our next attempt too

    faulty.before("write_if_absent", always_first)
    with pytest.raises(ConcurrentAppendError, match="lost the race for the timeline tail 3 times"):
        ours.append(requested("ours"))
    assert faulty.calls("write_if_absent") == 3  # every attempt of ours was raced
    faulty.clear_faults()
    assert {e.actor for e in ours.entries()} == {"theirs"}


def test_lost_reply_after_the_write_counts_as_success() -> None:
    storage = MemStorage()
    faulty = FaultyStorage(storage)
    timeline = Timeline(faulty)
    fill(timeline, 1)
    faulty.lose_reply("write_if_absent")
    entry, state = timeline.append(requested("ours"))
    assert faulty.pending() == 0  # the reply was lost
    assert entry.seq == 1 and state.tail_seq == 1
    assert [e.actor for e in Timeline(storage).entries()] == ["w", "ours"]  # exactly once


def test_unknown_outcome_that_never_settles() -> None:
    class Broken(MemStorage):
        def write_if_absent(self, key: str, data: bytes) -> None:
            raise StorageIOError("connection reset", key=key)

    timeline = Timeline(Broken(), max_append_attempts=2, table="t1")
    with pytest.raises(CommitStateUnknownError, match="outcome of the write of entry 0 is unknown"):
        timeline.append(requested())


def test_unknown_outcome_and_failing_reads() -> None:
    class ReadsFailAfterWrite(MemStorage):
        def read(self, key: str) -> bytes:
            if self.calls.get("write_if_absent"):
                raise StorageIOError("timeout", key=key)
            return super().read(key)

    faulty = FaultyStorage(ReadsFailAfterWrite())
    faulty.lose_reply("write_if_absent")
    with pytest.raises(CommitStateUnknownError, match="entry 0 is unknown") as info:
        Timeline(faulty, table="t1").append(requested())
    assert isinstance(info.value.__cause__, StorageIOError)
    assert info.value.table == "t1"


def test_malformed_entries_are_reported_and_skipped(
    storage: Storage, caplog: pytest.LogCaptureFixture
) -> None:
    timeline = Timeline(storage)
    fill(timeline, 1)
    storage.write_if_absent(entry_key(1), b'{"seq": 1, "oops": true}')
    storage.write_if_absent(entry_key(2), b'{"seq": 5}')
    entry, state = timeline.append(requested("after"))
    assert entry.seq == 3
    reloaded = Timeline(storage).load()
    assert reloaded == state
    assert [(r.seq, r.instant) for r in reloaded.rejected] == [(1, None), (2, None)]
    assert "malformed entry" in reloaded.rejected[0].reason
    assert [e.seq for e in Timeline(storage).entries()] == [0, 3]
    assert "timeline entry ignored: seq 1: an unreadable entry: malformed entry" in caplog.text


def test_illegal_entries_written_anyway_are_ignored_by_readers(storage: Storage) -> None:
    timeline = Timeline(storage)
    first, _ = timeline.append(requested())
    forged = first.model_copy(
        update={"seq": 1, "transition": Transition.COMPLETED, "payload": {"operation": "insert"}}
    )
    storage.write_if_absent(entry_key(1), forged.model_dump_json().encode())
    state = Timeline(storage).load()
    assert state.tail_seq == 1
    current = state.get(first.instant)
    assert current is not None and current.state is Transition.REQUESTED
    assert "completes only from inflight" in state.rejected[0].reason


def test_a_hole_in_the_log_is_an_error_for_listing_readers(storage: Storage) -> None:
    fill(Timeline(storage), 3)
    storage.delete(entry_key(1))
    with pytest.raises(TimelineCorruptError, match="entry 1 is missing but entry 2 exists"):
        Timeline(storage).load(full_replay=True)
    with pytest.raises(TimelineCorruptError, match="entry 1 is missing but entry 2 exists"):
        list(Timeline(storage).entries())


def test_sixteen_racing_appenders_land_every_entry_exactly_once(storage: Storage) -> None:
    writers, per_writer = 16, 8
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    # Each lost race means another writer's entry took the seq tried, so an append can lose at
    # most once per entry of the others (120): with that many attempts no writer can be starved
    # into ConcurrentAppendError, however the threads are scheduled (64 failed under load).
    attempts = (writers - 1) * per_writer + 1

    def run(w: int) -> None:
        timeline = Timeline(storage, max_append_attempts=attempts, checkpoint_interval=10)
        try:
            barrier.wait()
            for i in range(per_writer):
                timeline.append(requested(f"w{w}", op=f"{w}:{i}"))
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    entries = list(Timeline(storage).entries())
    assert [e.seq for e in entries] == list(range(writers * per_writer))
    ops = sorted(e.payload["operation"] for e in entries)
    assert ops == sorted(f"{w}:{i}" for w in range(writers) for i in range(per_writer))
    instants = [e.instant for e in entries]
    assert instants == sorted(instants) and len(set(instants)) == len(instants)
    state = Timeline(storage).load()
    assert state.rejected == () and state == Timeline(storage).load(full_replay=True)
