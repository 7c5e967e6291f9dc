"""``ManualClock``: a ``lakewarden.clock.Clock`` whose time moves only when a test moves it."""

from __future__ import annotations

import threading

# How often a thread blocked on the manual clock looks at a ``threading.Event`` it waits for
# (an event does not tell the clock it was set). Real time, and short: it only bounds how late
# a woken thread notices.
_EVENT_POLL_S = 0.002


class ManualClock:
    """Time that stands still until ``advance`` moves it (thread-safe).

    ``sleep`` and ``wait`` block until enough time was advanced (by the test, from another
    thread), so a background thread under test does its timed work exactly when the test says.
    With ``skip_sleeps=True``, ``sleep`` instead moves time forward itself and returns at once
    (temporalio's time skipping), for single-threaded code that sleeps while nobody else could
    advance the clock.

        clock = ManualClock()
        beat = Heartbeat(settings, table, instant, owner, clock=clock)
        clock.advance(0.2)              # the beat thread sees 0.2 s pass, at once
    """

    def __init__(self, start: float = 1_000.0, *, skip_sleeps: bool = False) -> None:
        self._now = start
        self._skip_sleeps = skip_sleeps
        self._changed = threading.Condition()
        self.slept: list[float] = []  # every sleep asked for, in order (for assertions)

    def monotonic(self) -> float:
        with self._changed:
            return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward by ``seconds`` and wake whoever waits on it; return the new time.

        Raises: ValueError (negative ``seconds``: monotonic time never goes back)."""
        if seconds < 0:
            raise ValueError(f"a monotonic clock cannot go back ({seconds} s)")
        with self._changed:
            self._now += seconds
            self._changed.notify_all()
            return self._now

    def sleep(self, seconds: float) -> None:
        with self._changed:
            self.slept.append(seconds)
            if self._skip_sleeps:
                self._now += max(seconds, 0.0)
                self._changed.notify_all()
                return
            deadline = self._now + seconds
            self._changed.wait_for(lambda: self._now >= deadline)

    def wait(self, event: threading.Event, until: float) -> bool:
        while not event.is_set():
            with self._changed:
                if self._now >= until:
                    return False
                self._changed.wait(_EVENT_POLL_S)
        return True
