"""What tests of lakewarden, and of code built on it, need: a clock they move themselves, a
simulated crash, a condition wait and a storage wrapper that records calls. Shipped with the
library (as temporalio ships its test environment), so an application's tests can drive a
``Heartbeat`` or a ``FaultyStorage`` the same way ours do.
"""

from lakewarden.testing.calls import CallRecorder
from lakewarden.testing.clock import ManualClock
from lakewarden.testing.crash import SimulatedCrash
from lakewarden.testing.faults import Fault, FaultPlan, fault_plan
from lakewarden.testing.wait import wait_until

__all__ = [
    "CallRecorder",
    "Fault",
    "FaultPlan",
    "ManualClock",
    "SimulatedCrash",
    "fault_plan",
    "wait_until",
]
