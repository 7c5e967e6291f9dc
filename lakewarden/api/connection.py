"""Where a table's coordinator comes from: the one place that picks a coordinator.

    connection = connect(settings)                   # Kafka configured: the services' lock
    table = Table.open(uri, coordinator=connection.coordinator, settings=connection.settings)
    connection.close()

    connection = connect(settings, require_kafka=True)   # a service: Kafka or refuse to start

Library code (``Table``, the writer, the job commit, the error table, the Spark driver's
transaction) receives a ``Coordinator`` and a ``Storage`` and never picks one itself. Only the
edges call this module: the services' ``__main__``, the CLI, the Spark data source (Spark
instantiates it from options, so nobody can hand it a coordinator), and the conveniences
``Table.create`` / ``Table.open`` / ``lakewarden.read`` when they are given no coordinator.

Storage has a factory of its own, one layer down, ``lakewarden.storage.open_storage``: the
backend follows the URI's scheme, as pyiceberg's ``load_file_io`` picks a FileIO. Every
component that opens a table's storage (``Table``, a Spark executor, a reader, a service
opening the table a request names) calls it; none builds a backend itself.

The coordinator follows the settings, as pyiceberg's ``load_catalog`` picks a catalog:
``settings.kafka.bootstrap_servers`` set means ``KafkaCoordinator`` (the table lock is
timeline-lock's lease, heartbeats go to heartbeat-monitor), unset means the in-process
``EmbeddedCoordinator``. Like pyiceberg's catalog loaders, the Kafka implementation is imported
only when chosen (it lives in ``lakewarden.clients``, a layer below this one), so a process
without Kafka never loads confluent-kafka for it.

``shared_connection`` is the edges' process-wide registry: one connection per coordinator
configuration, so two ``Table.open(uri)`` in one process take turns on one lock, and the Spark
driver's steps of one write (opened separately by Spark) see each other's heartbeats.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from lakewarden.errors import ConfigurationError, MissingExtraError
from lakewarden.settings import Settings
from lakewarden.table.coordinator import Coordinator, EmbeddedCoordinator


def require_kafka(settings: Settings) -> None:
    """Return when ``settings`` name a Kafka broker.

    Raises:
        ConfigurationError: no ``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS``; a service must not run
            on the embedded coordinator (its commits would skip timeline-lock and
            heartbeat-monitor while every other writer of the table uses them).
    """
    if not settings.kafka.enabled:
        raise ConfigurationError(
            "Kafka is not configured, and a service takes its table locks from timeline-lock. "
            "Help: set LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS (for the local stack: the broker "
            "`lakewarden dev up` prints)."
        )


def load_coordinator(settings: Settings, *, require: bool = False) -> Coordinator:
    """A new coordinator for ``settings``: ``KafkaCoordinator`` when Kafka is configured, else
    an ``EmbeddedCoordinator``. The caller owns it (``close`` it when it is a Kafka one).

    Raises:
        ConfigurationError: ``require`` and Kafka is not configured (see ``require_kafka``).
        MissingExtraError: Kafka is configured and confluent-kafka is not installed.
    """
    if require:
        require_kafka(settings)
    if not settings.kafka.enabled:
        return EmbeddedCoordinator(settings.heartbeat)
    # Loaded only when chosen (see the module docstring).
    try:
        from lakewarden.clients.kafka_coordinator import KafkaCoordinator
    except MissingExtraError as err:
        raise MissingExtraError(
            err.extra,
            feature="The Kafka coordinator (kafka.bootstrap_servers is set)",
            module=err.name or "confluent_kafka",
        ) from err

    return KafkaCoordinator(settings)


@dataclass(eq=False)
class Connection:
    """Settings and the coordinator built from them; every table given this coordinator
    takes its lock and beats through it."""

    settings: Settings
    coordinator: Coordinator
    _closed: bool = field(default=False, repr=False)

    def close(self) -> None:
        """Close the coordinator (a Kafka one releases its leases and closes its clients)."""
        if self._closed:
            return
        self._closed = True
        self.coordinator.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def connect(settings: Settings | None = None, *, require_kafka: bool = False) -> Connection:
    """A new connection from ``settings`` (default: ``Settings()``, from the environment).

    Raises:
        ConfigurationError: ``require_kafka`` and Kafka is not configured.
    """
    settings = settings if settings is not None else Settings()
    return Connection(settings, load_coordinator(settings, require=require_kafka))


_shared: dict[str, Connection] = {}
_shared_guard = threading.Lock()


def _coordinator_key(settings: Settings) -> str:
    """What a coordinator is built from (Kafka and heartbeats; never S3 or its secrets)."""
    parts: dict[str, Any] = {
        "kafka": settings.kafka.model_dump(mode="json"),
        "heartbeat": settings.heartbeat.model_dump(mode="json"),
    }
    return json.dumps(parts, sort_keys=True)


def shared_connection(settings: Settings | None = None) -> Connection:
    """The process-wide connection for ``settings``' coordinator configuration, made on first
    use. For edges that cannot be handed a connection (see the module docstring); never
    closed by its users: ``close_shared_connections`` closes them all.
    """
    settings = settings if settings is not None else Settings()
    key = _coordinator_key(settings)
    with _shared_guard:
        found = _shared.get(key)
        if found is None:
            found = _shared[key] = connect(settings)
        return found


def close_shared_connections() -> None:
    """Close and forget every shared connection (before the broker goes away, in tests)."""
    with _shared_guard:
        connections = list(_shared.values())
        _shared.clear()
    for connection in connections:
        connection.close()
