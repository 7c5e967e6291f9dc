"""``SimulatedCrash``: a process dying at a chosen point, for tests that inject it."""

from __future__ import annotations


class SimulatedCrash(BaseException):
    """A process dying at this point.

    Not an ``Exception``: no stage, retry loop or ``except Exception`` handles it and no failure
    summary is written, exactly as after a real crash (a ``SIGKILL`` runs no handler either).
    Raise it from a ``FaultyStorage`` fault, a stage hook or a strategy, then check what the next
    process finds."""
