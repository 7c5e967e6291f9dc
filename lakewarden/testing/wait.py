"""``wait_until``: wait for a condition instead of sleeping and hoping it became true."""

from __future__ import annotations

import time
from collections.abc import Callable

_POLL_S = 0.005


def wait_until(predicate: Callable[[], object], timeout_s: float = 10.0, what: str = "") -> None:
    """Return as soon as ``predicate()`` is truthy; fail after ``timeout_s`` real seconds.

    The timeout is a safety net against a hang, not a speed claim: make it generous (a loaded
    CI machine is slow), and assert timing with a ``ManualClock`` or in a benchmark instead.

    Raises: AssertionError (``timeout_s`` passed; the message names ``what`` was awaited)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what or predicate}")
        time.sleep(_POLL_S)
