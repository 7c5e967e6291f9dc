"""The shipped test clock and condition wait: time moves only when told, waiters wake then."""

from __future__ import annotations

import threading

import pytest

from lakewarden.clock import SYSTEM_CLOCK, Clock
from lakewarden.testing import ManualClock, wait_until


def test_time_stands_still_until_advanced() -> None:
    clock = ManualClock(start=5.0)
    assert clock.monotonic() == 5.0
    assert clock.advance(1.5) == 6.5 and clock.monotonic() == 6.5
    with pytest.raises(ValueError, match="cannot go back"):
        clock.advance(-1)


def test_a_sleeper_wakes_when_enough_time_was_advanced() -> None:
    clock = ManualClock()
    woke = threading.Event()

    def sleeper() -> None:
        clock.sleep(1.0)
        woke.set()

    thread = threading.Thread(target=sleeper)
    thread.start()
    wait_until(lambda: clock.slept == [1.0], what="the sleeper to sleep")
    clock.advance(0.5)
    assert not woke.is_set()  # half the time: the sleeper cannot have returned
    clock.advance(0.5)
    thread.join(10)
    assert woke.is_set()


def test_wait_returns_on_the_event_or_when_the_timeout_passed_on_the_clock() -> None:
    clock = ManualClock()
    event = threading.Event()
    event.set()
    assert clock.wait(event, 1_060.0) is True  # set already: at once, no time moves
    results: list[bool] = []
    unset = threading.Event()
    thread = threading.Thread(target=lambda: results.append(clock.wait(unset, 1_002.0)))
    thread.start()
    clock.advance(2.0)
    thread.join(10)
    assert results == [False] and clock.monotonic() == 1_002.0


def test_skip_sleeps_moves_time_itself_and_records_every_sleep() -> None:
    clock = ManualClock(skip_sleeps=True)
    clock.sleep(0.25)
    clock.sleep(0.5)
    assert clock.slept == [0.25, 0.5] and clock.monotonic() == 1_000.75


def test_the_manual_and_the_system_clock_are_clocks() -> None:
    clocks: list[Clock] = [ManualClock(), SYSTEM_CLOCK]
    for clock in clocks:
        assert clock.wait(threading.Event(), clock.monotonic()) is False  # the deadline is now
    before = SYSTEM_CLOCK.monotonic()
    SYSTEM_CLOCK.sleep(0.001)
    assert SYSTEM_CLOCK.monotonic() > before


def test_wait_until_names_what_it_waited_for() -> None:
    wait_until(lambda: True, 0, "nothing")
    with pytest.raises(AssertionError, match="waiting for the impossible"):
        wait_until(lambda: False, 0.01, "the impossible")
