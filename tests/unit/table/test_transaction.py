"""The write transaction and the embedded coordinator it runs under."""

from __future__ import annotations

import threading
import time

import pytest
from _memstore import MemStorage

from lakewarden.storage.faults import FaultyStorage
from lakewarden.table.conflicts import OverlappingCommitConflict, PendingPlanConflict
from lakewarden.table.coordinator import (
    EmbeddedCoordinator,
    Liveness,
    LockReentryError,
    LockTimeoutError,
)
from lakewarden.table.instant import Action, Transition
from lakewarden.table.plans import ServicePlan
from lakewarden.table.stats import CommitStats, FileGroupId, WorkloadProfile, WriteStat
from lakewarden.table.timeline import (
    EntryDraft,
    IllegalTransitionError,
    Timeline,
    TimelineEntry,
    TimelineState,
)
from lakewarden.table.transaction import WriteTransaction
from lakewarden.testing import wait_until

FG = FileGroupId(partition_path="", file_id="bucket-0")


def stats_for(tx: WriteTransaction, *groups: FileGroupId) -> CommitStats:
    return CommitStats(
        operation=tx.operation,
        write_stats=tuple(
            WriteStat(
                file_group=g,
                path=f"{g.file_id}_{tx.instant}.parquet",
                base_instant=tx.instant,
                num_records=3,
                size_bytes=100,
            )
            for g in groups
        ),
    )


@pytest.fixture
def timeline() -> Timeline:
    return Timeline(MemStorage(), table="orders")


def begin(
    timeline: Timeline, coord: EmbeddedCoordinator, actor: str = "w", **kwargs: object
) -> WriteTransaction:
    return WriteTransaction.begin(
        timeline, coord, "orders", operation="upsert", actor=actor, **kwargs
    )  # type: ignore[arg-type]


def test_requested_inflight_completed_with_lease_tokens(timeline: Timeline) -> None:
    coord = EmbeddedCoordinator()
    tx = begin(timeline, coord)
    tx.inflight(WorkloadProfile(operation="upsert", file_groups=(FG,)))
    entry = tx.complete(stats_for(tx, FG))
    assert entry.transition is Transition.COMPLETED and entry.instant == tx.instant
    entries = list(timeline.entries())
    assert [e.transition for e in entries] == ["requested", "inflight", "completed"]
    assert [e.lock_token for e in entries] == [1, 2, 3]  # one grant per step, increasing
    assert entries[0].payload == {"operation": "upsert", "cancellable": False, "plan": None}
    done = tx.status()
    assert done is not None and done.state is Transition.COMPLETED
    assert done.commit == stats_for(tx, FG)
    assert done.workload is None  # dropped on completion: the write statistics are the truth


def test_instants_increase_even_when_the_clock_goes_back(
    timeline: Timeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    coord = EmbeddedCoordinator()
    first = begin(timeline, coord)
    monkeypatch.setattr(time, "time_ns", lambda: 0)  # the clock jumps to 1970
    second = begin(timeline, coord)
    assert second.instant > first.instant


def test_overlapping_commit_fails_and_can_roll_back(timeline: Timeline) -> None:
    coord = EmbeddedCoordinator()
    a, b = begin(timeline, coord, "a"), begin(timeline, coord, "b")
    for tx in (a, b):
        tx.inflight(WorkloadProfile(operation="upsert", file_groups=(FG,)))
    a.complete(stats_for(a, FG))
    with pytest.raises(OverlappingCommitConflict, match=f"{b.instant}.*{a.instant}") as info:
        b.complete(stats_for(b, FG))
    assert info.value.file_group == "bucket-0" and info.value.other_instant == a.instant
    status = b.status()
    assert status is not None and status.state is Transition.INFLIGHT  # left pending
    b.rollback("conflict with " + a.instant)
    b.rollback("again")  # idempotent
    status = b.status()
    assert status is not None and status.state is Transition.ROLLED_BACK
    assert status.reason == "conflict with " + a.instant
    assert [e.transition for e in timeline.entries()].count("rolled_back") == 1


def test_rebase_between_two_processes_rechecks_conflicts() -> None:
    """Two processes (own coordinator, own timeline cache) on one storage: the later one's
    append loses the race, rebases, and the re-run conflict check fails it."""
    storage = MemStorage()
    faulty = FaultyStorage(storage)  # b's process goes through it
    t1, t2 = Timeline(storage, table="orders"), Timeline(faulty, table="orders")
    c1, c2 = EmbeddedCoordinator(), EmbeddedCoordinator()
    a, b = begin(t1, c1, "a"), begin(t2, c2, "b")
    for tx in (a, b):
        tx.inflight(WorkloadProfile(operation="upsert", file_groups=(FG,)))
    faulty.before("write_if_absent", lambda: a.complete(stats_for(a, FG)))
    with pytest.raises(OverlappingCommitConflict):
        b.complete(stats_for(b, FG))
    state = Timeline(storage).load()
    assert [i.instant for i in state.completed()] == [a.instant] and state.rejected == ()


class _BatchDone(Exception):
    """The caller's own rule in the validate= tests."""


def test_validate_runs_after_the_conflict_rules_and_again_after_a_rebase() -> None:
    """A second process completes an instant while ours appends: our append loses the race,
    rebases, and ``validate`` sees the new state and refuses; the instant stays pending."""
    storage = MemStorage()
    faulty = FaultyStorage(storage)  # b's process goes through it
    t1, t2 = Timeline(storage, table="orders"), Timeline(faulty, table="orders")
    c1, c2 = EmbeddedCoordinator(), EmbeddedCoordinator()
    a, b = begin(t1, c1, "a"), begin(t2, c2, "b")
    a.inflight(WorkloadProfile(operation="upsert", file_groups=(FG,)))
    other = FileGroupId(partition_path="", file_id="bucket-1")  # no overlap: rules pass
    b.inflight(WorkloadProfile(operation="upsert", file_groups=(other,)))
    seen: list[int] = []

    def refuse_once_a_completed(state: TimelineState) -> None:
        seen.append(len(state.completed()))
        if state.completed():
            raise _BatchDone(f"{state.completed()[0].instant} did it already")

    def a_completes_first() -> None:
        a.complete(stats_for(a, FG))

    faulty.before("write_if_absent", a_completes_first)
    with pytest.raises(_BatchDone, match=f"{a.instant} did it already"):
        b.complete(stats_for(b, other), validate=refuse_once_a_completed)
    assert seen == [0, 1]  # before the append, and again against the rebased state
    status = b.status()
    assert status is not None and status.state is Transition.INFLIGHT  # left pending
    b.rollback("batch done")
    status = b.status()
    assert status is not None and status.state is Transition.ROLLED_BACK


def test_validate_comes_after_the_conflict_rules_and_passes_through(timeline: Timeline) -> None:
    coord = EmbeddedCoordinator()
    a, b = begin(timeline, coord, "a"), begin(timeline, coord, "b")
    for tx in (a, b):
        tx.inflight(WorkloadProfile(operation="upsert", file_groups=(FG,)))
    a.complete(stats_for(a, FG))
    called: list[str] = []
    with pytest.raises(OverlappingCommitConflict):  # the named rule wins; validate not reached
        b.complete(stats_for(b, FG), validate=lambda state: called.append("b"))
    assert called == []
    c = begin(timeline, coord, "c")
    c.inflight(WorkloadProfile(operation="upsert", file_groups=(FG,)))
    entry = c.complete(stats_for(c, FG), validate=lambda state: called.append(c.instant))
    assert entry.transition is Transition.COMPLETED and called == [c.instant]


def test_pending_plan_blocks_ingestion_and_a_completed_plan_beats_it(timeline: Timeline) -> None:
    coord = EmbeddedCoordinator()
    plan = ServicePlan(file_groups=(FG,))
    compaction = begin(timeline, coord, "svc", action=Action.COMPACTION, plan=plan)
    tx = begin(timeline, coord)
    # RFC-79 step 2: the rules run when the ingestion declares its file groups (nothing is
    # appended, the ingestion stays requested), before it writes anything.
    with pytest.raises(PendingPlanConflict, match="pending non-cancellable compaction plan"):
        tx.inflight(WorkloadProfile(operation="upsert", file_groups=(FG,)))
    compaction.inflight(WorkloadProfile(operation="compact", file_groups=(FG,)))
    compaction.complete(stats_for(compaction, FG))
    with pytest.raises(OverlappingCommitConflict, match=f"{compaction.instant} \\(compaction"):
        tx.inflight(WorkloadProfile(operation="upsert", file_groups=(FG,)))
    later = begin(timeline, coord)  # requested after the plan completed: ordered, no conflict
    later.inflight(WorkloadProfile(operation="upsert", file_groups=(FG,)))
    later.complete(stats_for(later, FG))


def test_cancel_requested_plan_never_completes(timeline: Timeline) -> None:
    coord = EmbeddedCoordinator()
    plan = ServicePlan(file_groups=(FG,))
    tx = begin(timeline, coord, "svc", action=Action.CLUSTERING, cancellable=True, plan=plan)
    tx.inflight(WorkloadProfile(operation="cluster", file_groups=(FG,)))
    cancel = EntryDraft(
        instant=tx.instant,
        action=Action.CLUSTERING,
        transition=Transition.CANCEL_REQUESTED,
        actor="cancel-manager",
        lock_token=None,
        wall_time_ms=0,
        payload={"reason": "ingestion first"},
    )
    timeline.append(cancel)
    with pytest.raises(IllegalTransitionError, match="has a cancel request") as info:
        tx.complete(stats_for(tx, FG))
    assert info.value.instant == tx.instant and info.value.table == "orders"
    with pytest.raises(IllegalTransitionError, match="only ingestion is rolled back"):
        tx.rollback("no")


def test_rollback_of_a_completed_instant_is_refused(timeline: Timeline) -> None:
    coord = EmbeddedCoordinator()
    tx = begin(timeline, coord)
    tx.inflight(WorkloadProfile(operation="upsert"))
    tx.complete(stats_for(tx))
    with pytest.raises(IllegalTransitionError, match="already completed"):
        tx.rollback("too late")


# -- the embedded coordinator -----------------------------------------------------------------


def test_lock_is_exclusive_fifo_with_increasing_tokens() -> None:
    coord = EmbeddedCoordinator()
    order: list[tuple[int, int]] = []
    inside = threading.Lock()
    arrived: list[int] = []

    def worker(i: int) -> None:
        arrived.append(i)
        with coord.lock("t", wait_s=10) as lease:
            assert inside.acquire(blocking=False), "two holders at once"
            order.append((i, lease.token))
            # The first holder keeps the lock until every worker has come to take it.
            wait_until(lambda: len(arrived) == 8, what="every worker at the lock")
            inside.release()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(tok for _, tok in order) == list(range(1, 9))
    assert [tok for _, tok in order] == list(range(1, 9))
    with coord.lock("other") as lease:  # tokens are per table
        assert lease.token == 1


def test_lock_timeout_and_reentry() -> None:
    coord = EmbeddedCoordinator()
    with coord.lock("t") as lease:
        assert not lease.lost
        with pytest.raises(LockReentryError, match="already holds the lock of table t"):
            with coord.lock("t"):
                pass
        got: list[BaseException] = []
        thread = threading.Thread(target=lambda: _try_lock(coord, got))
        thread.start()
        thread.join()
        assert isinstance(got[0], LockTimeoutError)
        assert "not granted within 0.05 s" in str(got[0])
    assert lease.lost


def _try_lock(coord: EmbeddedCoordinator, got: list[BaseException]) -> None:
    try:
        with coord.lock("t", wait_s=0.05):
            pass
    except LockTimeoutError as err:
        got.append(err)


def test_an_expired_lease_is_taken_over_and_reports_lost() -> None:
    coord = EmbeddedCoordinator()
    with coord.lock("t", ttl_s=0.05) as stale:
        tokens: list[int] = []

        def take() -> None:
            with coord.lock("t", wait_s=5) as lease:
                tokens.append(lease.token)

        thread = threading.Thread(target=take)
        thread.start()
        thread.join()
        assert tokens == [2] and stale.lost


def test_liveness_from_heartbeats() -> None:
    coord = EmbeddedCoordinator()
    assert coord.liveness("t", "20240101000000000") is Liveness.UNKNOWN
    with coord.heartbeat("t", "20240101000000000", "w"):
        assert coord.liveness("t", "20240101000000000") is Liveness.ALIVE
    assert coord.liveness("t", "20240101000000000") is Liveness.DEAD


class _Announcing(EmbeddedCoordinator):
    """Records what the transaction announces (the Kafka coordinator publishes it)."""

    def __init__(self) -> None:
        super().__init__()
        self.announced: list[tuple[str, int, str]] = []

    def announce(self, table_id: str, entry: TimelineEntry) -> None:
        self.announced.append((table_id, entry.seq, str(entry.transition)))


def test_every_appended_entry_is_announced_once_unless_the_caller_publishes_itself(
    timeline: Timeline,
) -> None:
    coord = _Announcing()
    tx = begin(timeline, coord)
    tx.inflight(WorkloadProfile(operation="upsert", file_groups=(FG,)))
    resumed = WriteTransaction.resume(
        timeline, coord, "orders", tx.instant, actor="jc", announce=False
    )
    resumed.complete(stats_for(tx, FG))

    assert coord.announced == [("orders", 0, "requested"), ("orders", 1, "inflight")]
    assert [e.seq for e in timeline.entries()] == [0, 1, 2]
