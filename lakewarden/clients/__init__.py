"""Clients of the lakewarden services, for writers, table services and the CLI.

LockClient, LockLease                    leases from timeline-lock (plain threads)
LockRefusedError, LockServiceUnavailableError, LockTimeoutError
KafkaCoordinator, coordinator_for        the table Coordinator on timeline-lock
Heartbeat, Heartbeats, HeartbeatLostError  heartbeats for heartbeat-monitor (a thread each)
Liveness, LivenessUnavailableError       heartbeat-monitor's verdicts, from its changelog
"""

from lakewarden.clients.heartbeat import Heartbeat, HeartbeatLostError, Heartbeats
from lakewarden.clients.kafka_coordinator import KafkaCoordinator, coordinator_for
from lakewarden.clients.liveness import Liveness, LivenessUnavailableError
from lakewarden.clients.lock import (
    LockClient,
    LockLease,
    LockRefusedError,
    LockServiceUnavailableError,
    LockTimeoutError,
)

__all__ = [
    "Heartbeat",
    "HeartbeatLostError",
    "Heartbeats",
    "KafkaCoordinator",
    "Liveness",
    "LivenessUnavailableError",
    "LockClient",
    "LockLease",
    "LockRefusedError",
    "LockServiceUnavailableError",
    "LockTimeoutError",
    "coordinator_for",
]
