"""``python -m lakewarden_services.cleaner``: run the cleaner until SIGTERM.

Environment: ``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS`` (required), ``LAKEWARDEN_KAFKA__TOPIC_PREFIX``,
``LAKEWARDEN_S3__*`` (tables on S3), ``LAKEWARDEN_HEALTH_PORT`` (health and metrics on
127.0.0.1), ``LAKEWARDEN_INSTANCE_ID`` (static group membership: a restart takes its
partitions back at once), ``LAKEWARDEN_COMMIT_INTERVAL_S``, ``LAKEWARDEN_LOG_LEVEL``,
``LAKEWARDEN_CLEANER_SWEEP_INTERVAL_S`` (default 60) and the hooks of
``lakewarden_services.cleaner.settings``. The table lock comes from timeline-lock and liveness
from heartbeat-monitor, which must be running.

Steps: 1. logfmt logging; 2. the topics exist (created idempotently, the registry's changelog
compacted); 3. the clean thread starts and the Kafka loop runs; SIGTERM/SIGINT stop the loop
(producer flushed, offsets committed, group left); 4. once the first assignment and its
recovery completed, the health endpoint listens. Once the topics exist, a thread connects the
clean's Kafka clients (``CleanWorker.warm_up``) so that the first clean does not wait for them.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, NoReturn

from lakewarden.table import Coordinator, connect
from lakewarden_services._common.loop_service import serve_loop
from lakewarden_services._common.table_loop import TableLoop, WorkPool
from lakewarden_services.cleaner.app import (
    SERVICE,
    TOPICS,
    cleaner_settings,
    group_id,
    service_settings,
    settings,
)
from lakewarden_services.cleaner.loop import build_loop
from lakewarden_services.cleaner.queue import CleanQueue
from lakewarden_services.cleaner.worker import CleanWorker


@functools.cache
def _coordinator() -> Coordinator:
    # The table lock is timeline-lock's lease, liveness heartbeat-monitor's: Kafka or refuse.
    # Built and connected by the warm-up thread once the topics exist (or by the first clean).
    return connect(settings, require_kafka=True).coordinator


def main() -> NoReturn:
    instance = service_settings.instance_id
    queue = CleanQueue()
    worker = CleanWorker(settings, _coordinator, cleaner_settings, instance=instance or "0")
    cleaning = WorkPool(queue, worker.clean, threads=1, name="clean")
    cleaning.start(threading.Event())
    loop: TableLoop | None = None

    warmed = False

    def build() -> TableLoop:
        nonlocal loop, warmed
        if not warmed:  # the topics exist now: connect the clean's clients beside the loop
            warmed = True
            threading.Thread(target=worker.warm_up, name="clean-warm-up", daemon=True).start()
        loop = build_loop(
            settings,
            queue,
            group_id=group_id,
            group_instance_id=f"{SERVICE}-{instance}" if instance else None,
            commit_interval_s=service_settings.commit_interval_s,
            sweep_interval_s=cleaner_settings.sweep_interval_s,
            wake=cleaning.wake,
        )
        return loop

    def details() -> dict[str, Any]:
        return {"tables": len(loop.registry) if loop else 0}

    serve_loop(
        SERVICE, service_settings, settings=settings, topics=TOPICS, build=build, details=details
    )


if __name__ == "__main__":
    main()
