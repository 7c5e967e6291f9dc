"""``run_rebuilding``: a loop whose consumer failed fatally is built again, not left dead."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from lakewarden.events import EventConsumerError
from services._common.loop_service import run_rebuilding
from services._common.membership import Membership


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


def test_a_loop_that_fails_fatally_is_replaced_by_a_new_one_that_serves() -> None:
    dead = _Loop(EventConsumerError("Consumer c failed: Static consumer fenced"))
    fresh = _Loop()
    ready: list[bool] = []
    built: list[_Loop] = []

    def rebuild() -> _Loop:
        built.append(fresh)
        return fresh

    run_rebuilding(
        dead,
        rebuild,
        threading.Event(),
        on_ready=lambda: ready.append(True),
        service="t",
        delay_s=0,
    )
    assert dead.ran and built == [fresh] and fresh.ran
    assert ready == [True]  # the new loop reports ready through the same health endpoint


def test_a_stop_during_the_wait_ends_without_building_again() -> None:
    stop = threading.Event()
    dead = _Loop(EventConsumerError("failed"))

    def rebuild() -> _Loop:
        raise AssertionError("built after the stop")

    stop.set()  # SIGTERM arrived while the loop was failing
    run_rebuilding(dead, rebuild, stop, on_ready=lambda: None, service="t", delay_s=0)
    assert dead.ran


def test_other_errors_are_not_swallowed() -> None:
    broken = _Loop(ValueError("a bug"))
    with pytest.raises(ValueError, match="a bug"):  # a bug surfaces, it is not retried
        run_rebuilding(broken, _Loop, threading.Event(), on_ready=lambda: None, service="t")
