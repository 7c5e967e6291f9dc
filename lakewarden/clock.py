"""The clock that times heartbeats, leases and injected latency, and the system clock.

Code where elapsed time decides something (a heartbeat window passing, a lease expiring, a
renewal falling due) reads the time through a ``Clock`` passed as a keyword argument, with
``SYSTEM_CLOCK`` as the default. Tests pass ``lakewarden.testing.ManualClock`` instead and move
time themselves, so they check "lost exactly after the tolerance" without asserting how fast
the machine is (temporalio ships its time-skipping test clock with its SDK the same way).

Only monotonic time is abstracted: wall-clock timestamps (``wall_time_ms`` of an entry) are
data, not timers.
"""

from __future__ import annotations

import threading
import time
from typing import Final, Protocol


class Clock(Protocol):
    """Monotonic seconds and the two ways to let them pass."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (its zero means nothing)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Return after ``seconds`` have passed on this clock."""
        ...

    def wait(self, event: threading.Event, until: float) -> bool:
        """Return True as soon as ``event`` is set, False once this clock reads ``until`` (a
        ``monotonic()`` value) without it. An absolute deadline: time that passes between
        computing it and calling ``wait`` is not lost (with a manual clock it would be)."""
        ...


class SystemClock:
    """The process's monotonic clock (``time.monotonic``), real sleeps and waits."""

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def wait(self, event: threading.Event, until: float) -> bool:
        return event.wait(max(until - time.monotonic(), 0.0))


SYSTEM_CLOCK: Final[Clock] = SystemClock()
