"""``SimulatedCrash``: a process dying at a chosen point, for tests that inject it (defined
beside the fault points, ``lakewarden.faults``, whose ``crash`` action raises it)."""

from __future__ import annotations

from lakewarden.faults import SimulatedCrash

__all__ = ["SimulatedCrash"]
