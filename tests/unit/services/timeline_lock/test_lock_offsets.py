"""timeline-lock's commit tracker: an offset is committed only past acknowledged writes."""

from __future__ import annotations

from lakewarden_services.timeline_lock.offsets import CommitTracker


def test_the_commit_waits_for_the_oldest_unacknowledged_write_of_its_partition() -> None:
    tracker = CommitTracker()
    tracker.processed(0, 10, durable_writes=1)  # changelog
    tracker.processed(0, 11, durable_writes=2)  # changelog + dead letter
    tracker.processed(0, 12, durable_writes=0)  # a duplicate: nothing to wait for
    tracker.processed(3, 5, durable_writes=1)
    assert tracker.to_commit() == {0: 10, 3: 5}
    tracker.delivered(0, 11)  # out of order, and one of two
    tracker.delivered(3, 5)
    assert tracker.to_commit() == {3: 6}  # partition 0 did not move: not committed again
    tracker.delivered(0, 10)
    assert tracker.to_commit() == {0: 11}
    tracker.delivered(0, 11)
    assert tracker.to_commit() == {0: 13} and tracker.pending() == 0
    assert tracker.to_commit() == {}


def test_a_write_never_acknowledged_holds_its_partition_back_and_revocation_forgets() -> None:
    tracker = CommitTracker()
    tracker.processed(1, 0, durable_writes=1)  # its delivery failed: never acknowledged
    tracker.processed(1, 1, durable_writes=1)
    tracker.delivered(1, 1)
    assert tracker.to_commit() == {1: 0}
    tracker.forget([1])
    tracker.delivered(1, 0)  # a late report for a revoked partition is ignored
    assert tracker.to_commit() == {} and tracker.pending() == 0
    tracker.processed(1, 7, durable_writes=0)  # assigned again, from a committed offset
    assert tracker.to_commit() == {1: 8}
