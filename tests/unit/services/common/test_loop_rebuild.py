"""``RebuildingLoop``: a loop whose consumer failed fatally is built again, not left dead."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from lakewarden.events import EventConsumerError
from lakewarden_services._common.loop_service import RebuildingLoop
from lakewarden_services._common.membership import Membership


class _Loop:
    """A loop worker that fails with ``failure`` (if any) or returns once it was ready."""

    def __init__(self, failure: Exception | None = None) -> None:
        self.failure = failure
        self.membership = Membership()
        self.rebalances = 0
        self.on_ready: Callable[[], None] = lambda: None
        self.ran = False

    def run(self, stop: threading.Event) -> None:
        self.ran = True
        if self.failure is not None:
            raise self.failure
        self.on_ready()


def _builds(*loops: _Loop) -> Callable[[], _Loop]:
    """``build`` returning ``loops`` in turn (a test fails if asked for one more)."""
    queue: Iterator[_Loop] = iter(loops)
    return lambda: next(queue)


def test_a_loop_that_fails_fatally_is_replaced_by_a_new_one_that_serves() -> None:
    dead = _Loop(EventConsumerError("Consumer c failed: Static consumer fenced"))
    fresh = _Loop()
    ready: list[bool] = []
    loop = RebuildingLoop(_builds(dead, fresh), service="t", delay_s=0)
    loop.on_ready = lambda: ready.append(True)
    loop.run(threading.Event())
    assert dead.ran and fresh.ran
    assert loop.worker is fresh and loop.rebuilds == 1  # what /health shows
    assert ready == [True]  # the new loop reports ready through the same health endpoint


def test_a_stop_during_the_wait_ends_without_building_again() -> None:
    stop = threading.Event()
    dead = _Loop(EventConsumerError("failed"))
    loop = RebuildingLoop(_builds(dead), service="t", delay_s=0)  # a second build would raise
    stop.set()  # SIGTERM arrived while the loop was failing
    loop.run(stop)
    assert dead.ran and loop.rebuilds == 0


def test_other_errors_are_not_swallowed() -> None:
    loop = RebuildingLoop(_builds(_Loop(ValueError("a bug")), _Loop()), service="t")
    with pytest.raises(ValueError, match="a bug"):  # a bug surfaces, it is not retried
        loop.run(threading.Event())
    assert loop.rebuilds == 0
