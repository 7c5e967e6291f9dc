"""Clients of the lakewarden services, for writers, table services and the CLI.

LockClient, LockLease                    leases from timeline-lock (plain threads)
LockRefusedError, LockServiceUnavailableError, LockTimeoutError
KafkaCoordinator, coordinator_for        the table Coordinator on timeline-lock
"""

from lakewarden.clients.kafka_coordinator import KafkaCoordinator, coordinator_for
from lakewarden.clients.lock import (
    LockClient,
    LockLease,
    LockRefusedError,
    LockServiceUnavailableError,
    LockTimeoutError,
)

__all__ = [
    "KafkaCoordinator",
    "LockClient",
    "LockLease",
    "LockRefusedError",
    "LockServiceUnavailableError",
    "LockTimeoutError",
    "coordinator_for",
]
