"""Lanes (job-committer's runtime) without a broker: events in order, an offset recorded only
once its event was handled, one lane never waits for the other, a revocation waits for the
event in progress and forgets the rest, a stop finishes the event in progress."""

from __future__ import annotations

import threading
from typing import Any

from lakewarden_services._common.lanes import Lane
from lakewarden_services._common.loop_service import Consumed


def _event(offset: int, *, topic: str = "t", partition: int = 0) -> Consumed:
    return Consumed(topic, partition, offset, b"k", b"v", 0.0)


class _Gate:
    """A handler that records what it handled and holds each event until released."""

    def __init__(self) -> None:
        self.handled: list[int] = []
        self.entered = threading.Semaphore(0)
        self.release = threading.Semaphore(0)

    def __call__(self, message: Consumed, value: Any) -> None:
        self.entered.release()
        assert self.release.acquire(timeout=10)
        self.handled.append(message.offset)


def test_an_offset_is_recorded_only_once_its_event_was_handled() -> None:
    gate = _Gate()
    lane = Lane("commits", gate, high_water=10)
    lane.start()
    try:
        lane.put(_event(5), None)
        lane.put(_event(6), None)
        assert gate.entered.acquire(timeout=10)
        assert lane.take_done() == [] and lane.pending() == 2  # 5 is in progress
        gate.release.release()
        assert gate.entered.acquire(timeout=10)  # 6 started: 5 is done
        [done] = lane.take_done()
        assert (done.topic, done.partition, done.offset) == ("t", 0, 6)
        gate.release.release()
    finally:
        lane.stop()
    assert gate.handled == [5, 6]  # in order


def test_one_lane_goes_on_while_the_other_is_busy() -> None:
    commits, manifests_seen = _Gate(), threading.Event()
    lanes = [
        Lane("commits", commits, high_water=10),
        Lane("manifests", lambda m, v: manifests_seen.set(), high_water=10),
    ]
    for lane in lanes:
        lane.start()
    try:
        lanes[0].put(_event(0), None)
        assert commits.entered.acquire(timeout=10)  # a commit in progress, held
        lanes[1].put(_event(0, topic="m"), None)
        assert manifests_seen.wait(10)  # the manifest is handled meanwhile
        commits.release.release()
    finally:
        for lane in lanes:
            lane.stop()


def test_a_revocation_waits_for_the_event_in_progress_and_forgets_the_queued() -> None:
    gate = _Gate()
    lane = Lane("commits", gate, high_water=10)
    lane.start()
    try:
        lane.put(_event(1, partition=3), None)
        lane.put(_event(2, partition=3), None)
        lane.put(_event(7, partition=4), None)
        assert gate.entered.acquire(timeout=10)
        settled = threading.Thread(target=lane.settle, args=({("t", 3)},))
        settled.start()
        settled.join(0.2)
        assert settled.is_alive()  # waits for event 1, in progress on partition 3
        gate.release.release()
        settled.join(10)
        assert not settled.is_alive()
        assert gate.entered.acquire(timeout=10)  # partition 4's event, still queued
        gate.release.release()
    finally:
        lane.stop()
    assert gate.handled == [1, 7]  # event 2 (revoked, not started) is left to the next owner


def test_a_stop_finishes_the_event_in_progress_and_drops_the_rest() -> None:
    gate = _Gate()
    lane = Lane("commits", gate, high_water=10)
    lane.start()
    lane.put(_event(1), None)
    lane.put(_event(2), None)
    assert gate.entered.acquire(timeout=10)
    stopping = threading.Thread(target=lane.stop)
    stopping.start()
    gate.release.release()
    stopping.join(10)
    assert not stopping.is_alive() and gate.handled == [1]
    assert [tp.offset for tp in lane.take_done()] == [2]  # 1 was answered; 2 is read again
