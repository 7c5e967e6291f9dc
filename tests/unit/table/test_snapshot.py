"""Snapshots computed from hand-built sequences of completed instants."""

from __future__ import annotations

from dataclasses import dataclass
from unittest import mock

import pytest

from lakewarden.table import snapshot as snapshot_module
from lakewarden.table.files import BaseFileName, LogFileName, WriteToken, file_key
from lakewarden.table.instant import Action, Transition
from lakewarden.table.snapshot import (
    InstantNotCompletedError,
    InstantNotOnTimelineError,
    SnapshotCache,
    build_snapshot,
    changes_since,
    snapshot_as_of_request,
)
from lakewarden.table.stats import CommitStats, FileGroupId, WriteStat
from lakewarden.table.timeline_state import InstantState, TimelineState

T1, T2, T3, T4 = (f"2024010100000000{i}" for i in range(1, 5))
EU = FileGroupId(partition_path="region=eu", file_id="00000000-0000")
EU1 = FileGroupId(partition_path="region=eu", file_id="00000001-0000")
US = FileGroupId(partition_path="region=us", file_id="00000000-0000")


@dataclass(frozen=True)
class Done:
    instant: str
    commit: CommitStats | None


def base(group: FileGroupId, instant: str, records: int = 10) -> WriteStat:
    name = BaseFileName(group.file_id, WriteToken(0, 0, 0), instant).render()
    return WriteStat(
        file_group=group,
        path=file_key(group.partition_path, name),
        base_instant=instant,
        num_records=records,
        size_bytes=100,
    )


def log(group: FileGroupId, base_instant: str, version: int) -> WriteStat:
    name = LogFileName(group.file_id, base_instant, version, WriteToken(0, 0, 0)).render()
    return WriteStat(
        file_group=group,
        path=file_key(group.partition_path, name),
        base_instant=base_instant,
        num_records=3,
        size_bytes=10,
    )


def commit(*stats: WriteStat, replaced: tuple[FileGroupId, ...] = ()) -> CommitStats:
    return CommitStats(operation="upsert", write_stats=stats, replaced_file_groups=replaced)


HISTORY = [
    Done(T1, commit(base(EU, T1), base(US, T1, 5))),
    Done(T3, commit(base(EU, T3, 12))),  # completed before T2: completion order is what counts
    Done(T2, commit(base(EU1, T2, 7))),
    Done(T4, None),  # a completed action without write statistics (e.g. a clean)
]


def paths(snapshot_files: list[WriteStat]) -> list[str]:
    return [s.path for s in snapshot_files]


def test_empty_timeline_is_an_empty_snapshot() -> None:
    snapshot = build_snapshot([])
    assert snapshot.as_of is None
    assert snapshot.base_files() == []
    assert snapshot.num_records == 0


def test_latest_slice_of_every_group() -> None:
    snapshot = build_snapshot(HISTORY)
    assert snapshot.as_of == T4
    assert paths(snapshot.base_files()) == [
        base(EU, T3).path,
        base(EU1, T2).path,
        base(US, T1).path,
    ]
    assert snapshot.num_records == 12 + 7 + 5
    eu = snapshot.slice_of(EU)
    assert eu is not None and eu.base_instant == T3 and eu.latest_instant == T3


def test_as_of_any_completed_instant() -> None:
    assert paths(build_snapshot(HISTORY, as_of=T1).base_files()) == [
        base(EU, T1).path,
        base(US, T1).path,
    ]
    # T3 completed before T2, so the snapshot as of T3 does not contain T2's file group.
    as_of_t3 = build_snapshot(HISTORY, as_of=T3)
    assert as_of_t3.as_of == T3
    assert paths(as_of_t3.base_files()) == [base(EU, T3).path, base(US, T1).path]


def test_as_of_an_unknown_instant_is_named() -> None:
    with pytest.raises(InstantNotCompletedError, match="as_of '20990101000000000' is not a"):
        build_snapshot(HISTORY, as_of="20990101000000000")


def test_replaced_groups_leave_and_may_come_back() -> None:
    history = [
        *HISTORY,
        Done("20240101000000005", commit(replaced=(EU, US))),
    ]
    assert paths(build_snapshot(history).base_files()) == [base(EU1, T2).path]
    history.append(Done("20240101000000006", commit(base(US, "20240101000000006"))))
    assert paths(build_snapshot(history).base_files()) == [
        base(EU1, T2).path,
        base(US, "20240101000000006").path,
    ]


def test_log_files_join_the_slice_of_their_base_instant() -> None:
    history = [
        Done(T1, commit(base(EU, T1))),
        Done(T2, commit(log(EU, T1, 1))),
        Done(T3, commit(log(EU, T1, 2), log(US, T3, 1))),
    ]
    snapshot = build_snapshot(history)
    eu = snapshot.slice_of(EU)
    assert eu is not None
    assert eu.paths == (base(EU, T1).path, log(EU, T1, 1).path, log(EU, T1, 2).path)
    assert eu.base_instant == T1 and eu.latest_instant == T3
    us = snapshot.slice_of(US)
    assert us is not None and us.base_file is None and us.paths == (log(US, T3, 1).path,)
    # A new base file supersedes the slice and its logs.
    history.append(Done(T4, commit(base(EU, T4))))
    eu = build_snapshot(history).slice_of(EU)
    assert eu is not None and eu.paths == (base(EU, T4).path,)


def test_changes_since() -> None:
    changes = changes_since(HISTORY, since=T1)
    assert changes.instants == (T3, T2, T4)
    assert sorted(s.file_group.file_id for s in changes.slices()) == [EU.file_id, EU1.file_id]
    everything = changes_since(HISTORY, since=None)
    assert everything.instants == (T1, T3, T2, T4)
    assert len(everything.slices()) == 3
    until = changes_since(HISTORY, since=T1, until=T3)
    assert until.instants == (T3,)
    assert [s.file_group for s in until.slices()] == [EU]
    assert changes_since(HISTORY, since=T4).slices() == []


def test_changes_since_an_instant_that_is_not_completed() -> None:
    with pytest.raises(InstantNotCompletedError, match="since_instant '20240101000000009'"):
        changes_since(HISTORY, since="20240101000000009")


def _state(
    instant: str, requested: int, completed: int | None, stats: CommitStats | None
) -> InstantState:
    return InstantState(
        instant=instant,
        action=Action.COMMIT,
        state=Transition.COMPLETED if completed is not None else Transition.INFLIGHT,
        requested_seq=requested,
        last_seq=completed if completed is not None else requested + 1,
        completed_seq=completed,
        commit=stats,
    )


def _requested_around_completions() -> TimelineState:
    """T1 requested (0) and completed (2), T2 requested (1) and completed (5), T3 requested
    (3) and pending."""
    return TimelineState(
        instants={
            T1: _state(T1, 0, 2, commit(base(EU, T1))),
            T2: _state(T2, 1, 5, commit(base(US, T2))),
            T3: _state(T3, 3, None, None),
        },
        tail_seq=5,
    )


def test_snapshot_as_of_request_holds_what_completed_before_the_request() -> None:
    """T1 completed before T3 was requested, T2 after: T3 builds on T1 alone."""
    timeline = _requested_around_completions()
    snapshot = snapshot_as_of_request(timeline, T3)
    assert snapshot.as_of == T1
    assert set(snapshot.slices) == {EU}
    assert snapshot_as_of_request(timeline, T1).as_of is None  # nothing completed before T1
    with pytest.raises(InstantNotOnTimelineError, match=f"instant {T4} is not on the timeline"):
        snapshot_as_of_request(timeline, T4, table="t")


def test_a_kept_cache_gives_the_replay_of_every_prefix_it_is_asked_for() -> None:
    """Growing prefixes (a table's writes one after another), the same prefix again, shorter
    ones (a writer whose request came before another's completion), then growing again."""
    cache = SnapshotCache()
    for end in (0, 1, 2, 2, 4, 1, 3, 4, 0, 4):
        got = cache.latest(HISTORY[:end])
        want = build_snapshot(HISTORY[:end])
        assert (got.as_of, list(got.slices.items())) == (want.as_of, list(want.slices.items()))


def test_a_recent_prefix_is_answered_without_a_rebuild() -> None:
    # A writer asks for the prefix before its request after the completion that followed it
    # was applied (by its read manifest, or another thread's write).
    cache = SnapshotCache()
    before = cache.latest(HISTORY[:3])
    cache.latest(HISTORY)
    with mock.patch.object(snapshot_module, "_apply", wraps=snapshot_module._apply) as applied:
        assert cache.latest(HISTORY[:3]) is before
        cache.latest(HISTORY)
    assert applied.call_count == 0


def test_a_cached_snapshot_is_not_changed_by_later_calls() -> None:
    cache = SnapshotCache()
    first = cache.latest(HISTORY[:1])
    cache.latest(HISTORY)
    assert (first.as_of, set(first.slices)) == (T1, {EU, US})
    assert first.slices[EU].base_instant == T1


def test_snapshot_as_of_request_through_a_cache() -> None:
    timeline = _requested_around_completions()
    cache = SnapshotCache()
    assert set(snapshot_as_of_request(timeline, T3, cache=cache).slices) == {EU}
    assert snapshot_as_of_request(timeline, T2, cache=cache).as_of is None  # requested first
    assert set(snapshot_as_of_request(timeline, T3, cache=cache).slices) == {EU}
