"""KafkaCoordinator: the table lock of every timeline transaction held at timeline-lock.

    table = Table.open(uri, coordinator=KafkaCoordinator(settings))
    table = Table.open(uri, coordinator=coordinator_for(settings))   # Kafka when configured

Each ``WriteTransaction`` step takes the table's lease from timeline-lock; its fencing token
goes into the entry appended, and a lease lost before the append stops it (``LeaseLostError``).
Writers in different processes and on different machines take turns on one lock, FIFO.

Liveness of instants is not served by timeline-lock: until the heartbeat-monitor service
exists, ``heartbeat`` and ``liveness`` are this process's own (as in ``EmbeddedCoordinator``):
ALIVE for instants this process is heartbeating, DEAD for ones it stopped, UNKNOWN otherwise.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from lakewarden.clients.lock import LockClient, LockLease
from lakewarden.settings import Settings
from lakewarden.table.coordinator import (
    Coordinator,
    EmbeddedCoordinator,
    Liveness,
    LockReentryError,
)


class KafkaCoordinator(Coordinator):
    """``Coordinator`` whose table lock is timeline-lock's lease (via one ``LockClient``)."""

    def __init__(
        self, settings: Settings, *, client: LockClient | None = None, owner: str | None = None
    ) -> None:
        self.settings = settings
        self.client = client if client is not None else LockClient(settings, owner=owner)
        self._owns_client = client is None
        self._local = EmbeddedCoordinator()
        self._guard = threading.Lock()
        self._held: dict[tuple[str, int], LockLease] = {}

    @contextmanager
    def lock(
        self, table_id: str, *, ttl_s: float = 30.0, wait_s: float = 30.0
    ) -> Iterator[LockLease]:
        """Hold the table's lease for the ``with`` block (renewed in the background).

        Raises:
            LockReentryError: this thread holds the table's lock already (it would wait for
                itself until ``wait_s``).
            LockTimeoutError: not granted within ``wait_s``.
            LockRefusedError, LockServiceUnavailableError: see ``LockClient.acquire``.
        """
        key = (table_id, threading.get_ident())
        with self._guard:
            held = self._held.get(key)
        if held is not None and not held.lost:
            raise LockReentryError(
                f"this thread already holds the lock of table {table_id} (token {held.token}). "
                "Help: do the work inside the first `with` block.",
                table=table_id,
            )
        with self.client.hold(table_id, ttl_s=ttl_s, wait_s=wait_s) as lease:
            with self._guard:
                self._held[key] = lease
            try:
                yield lease
            finally:
                with self._guard:
                    self._held.pop(key, None)

    def liveness(self, table_id: str, instant: str) -> Liveness:
        """This process's view only (see the module docstring)."""
        return self._local.liveness(table_id, instant)

    def heartbeat(self, table_id: str, instant: str, owner: str) -> AbstractContextManager[None]:
        """Marks ``instant`` alive in this process (see the module docstring)."""
        return self._local.heartbeat(table_id, instant, owner)

    def close(self) -> None:
        """Close the lock client if this coordinator created it (releases held leases)."""
        if self._owns_client:
            self.client.close()


_shared: dict[tuple[str, str], KafkaCoordinator] = {}
_shared_guard = threading.Lock()


def coordinator_for(settings: Settings | None = None) -> Coordinator:
    """The coordinator ``settings`` call for: one process-wide ``KafkaCoordinator`` per broker
    and topic prefix when Kafka is configured, else the process-wide embedded one."""
    from lakewarden.table.table import default_coordinator

    settings = settings or Settings()
    servers = settings.kafka.bootstrap_servers
    if servers is None:
        return default_coordinator()
    key = (servers, settings.kafka.topic_prefix)
    with _shared_guard:
        if key not in _shared:
            _shared[key] = KafkaCoordinator(settings)
        return _shared[key]
