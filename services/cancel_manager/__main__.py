"""``python -m lakewarden_services.cancel_manager``: run cancel-manager until SIGTERM.

Environment: ``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS`` (required), ``LAKEWARDEN_KAFKA__TOPIC_PREFIX``,
``LAKEWARDEN_S3__*`` (tables on S3), ``LAKEWARDEN_HEALTH_PORT`` (health and metrics on
127.0.0.1), ``LAKEWARDEN_INSTANCE_ID`` (static group membership: a restart takes its
partitions back at once), ``LAKEWARDEN_COMMIT_INTERVAL_S``, ``LAKEWARDEN_LOG_LEVEL``. The table
lock and liveness come from timeline-lock and heartbeat-monitor, which must be running.

Steps: 1. logfmt logging; 2. the topics exist (created idempotently, the registry's changelog
compacted); 3. the loop runs; SIGTERM/SIGINT stop it (producer flushed, offsets committed,
group left); 4. once the first assignment and its recovery completed, the health endpoint
listens.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, NoReturn

from lakewarden.clients import KafkaCoordinator, LockClient
from lakewarden.table import Coordinator, require_kafka
from lakewarden_services._common.loop_service import serve_loop
from lakewarden_services.cancel_manager.app import (
    SERVICE,
    TOPICS,
    service_settings,
    settings,
)
from lakewarden_services.cancel_manager.loop import Loop

log = logging.getLogger(__name__)


def _coordinator(
    loop: Callable[[], Loop | None], made: list[Callable[[], None]]
) -> Callable[[], Coordinator]:
    """The coordinator of a loop: timeline-lock's lease and heartbeat-monitor's liveness
    (Kafka or refuse), built on the loop's first event, on its thread (no network IO before
    the loop runs). Its lock requests go through the loop's producer (``LockClient``'s
    ``producer``): a request's result and its lock's release leave on one connection. How
    to close it is appended to ``made``."""

    @functools.cache
    def coordinator() -> Coordinator:
        require_kafka(settings)
        built = loop()
        assert built is not None  # called by the loop's worker: the loop exists
        client = LockClient(settings, producer=built.producer)
        made.append(client.close)
        kafka = KafkaCoordinator(settings, client=client)
        made.append(kafka.close)
        return kafka

    return coordinator


def main() -> NoReturn:
    loop: Loop | None = None
    made: list[Callable[[], None]] = []

    def build() -> Loop:
        nonlocal loop
        while made:  # a rebuilt loop: the old coordinator sent through the old loop's producer
            made.pop()()
        loop = Loop(
            settings,
            _coordinator(lambda: loop, made),
            group=service_settings.group(SERVICE, settings),
            commit_interval_s=service_settings.commit_interval_s,
        )
        return loop

    def details(running: Loop) -> dict[str, Any]:
        return {"tables": len(running.registry)}

    serve_loop(
        SERVICE, service_settings, settings=settings, topics=TOPICS, build=build, details=details
    )


if __name__ == "__main__":
    main()
