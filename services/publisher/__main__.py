"""``python -m lakewarden_services.publisher``: run the publisher until SIGTERM.

Environment: ``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS`` (required), ``LAKEWARDEN_KAFKA__TOPIC_PREFIX``,
``LAKEWARDEN_S3__*`` (tables on S3), ``LAKEWARDEN_HEALTH_PORT`` (health and metrics on
127.0.0.1), ``LAKEWARDEN_INSTANCE_ID`` (static group membership: a restart takes its
partitions back at once), ``LAKEWARDEN_COMMIT_INTERVAL_S``, ``LAKEWARDEN_LOG_LEVEL``,
``LAKEWARDEN_PUBLISHER_SWEEP_INTERVAL_S`` (default 30) and ``LAKEWARDEN_PUBLISHER_CONCURRENCY``
(tables synced at once, default 8).

Steps: 1. logfmt logging; 2. the topics exist (created idempotently, the registry's changelog
compacted); 3. the sync threads start and the Kafka loop runs; SIGTERM/SIGINT stop the loop
(producer flushed, offsets committed, group left); 4. once the first assignment and its
recovery completed, the health endpoint listens.
"""

from __future__ import annotations

import threading
from typing import Any, NoReturn

from lakewarden_services._common.loop_service import serve_loop
from lakewarden_services._common.table_loop import TableLoop, WorkPool
from lakewarden_services.publisher.app import (
    SERVICE,
    TOPICS,
    group_id,
    publisher_settings,
    service_settings,
    settings,
)
from lakewarden_services.publisher.handler import PublishQueue
from lakewarden_services.publisher.loop import build_loop
from lakewarden_services.publisher.worker import PublishWorker


def main() -> NoReturn:
    instance = service_settings.instance_id
    queue = PublishQueue()
    worker = PublishWorker(settings)
    syncing = WorkPool(queue, worker.sync, threads=publisher_settings.concurrency, name="publish")
    syncing.start(threading.Event())
    loop: TableLoop | None = None

    def build() -> TableLoop:
        nonlocal loop
        loop = build_loop(
            settings,
            queue,
            group_id=group_id,
            group_instance_id=f"{SERVICE}-{instance}" if instance else None,
            commit_interval_s=service_settings.commit_interval_s,
            sweep_interval_s=publisher_settings.sweep_interval_s,
            wake=syncing.wake,
        )
        return loop

    def details() -> dict[str, Any]:
        return {"tables": len(loop.registry) if loop else 0}

    serve_loop(
        SERVICE, service_settings, settings=settings, topics=TOPICS, build=build, details=details
    )


if __name__ == "__main__":
    main()
