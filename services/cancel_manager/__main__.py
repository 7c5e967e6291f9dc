"""``python -m services.cancel_manager``: run cancel-manager until SIGTERM.

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
from typing import Any, NoReturn

from lakewarden.table import Coordinator, connect
from services._common.loop_service import serve_loop
from services.cancel_manager.app import SERVICE, TOPICS, group_id, service_settings, settings
from services.cancel_manager.loop import Loop

log = logging.getLogger(__name__)


@functools.cache
def _coordinator() -> Coordinator:
    # timeline-lock's lease and heartbeat-monitor's liveness: Kafka or refuse. Built on the
    # first event, on the loop's thread: no network IO before the loop runs.
    return connect(settings, require_kafka=True).coordinator


def main() -> NoReturn:
    instance = service_settings.instance_id
    loop: Loop | None = None

    def build() -> Loop:
        nonlocal loop
        loop = Loop(
            settings,
            _coordinator,
            group_id=group_id,
            group_instance_id=f"{SERVICE}-{instance}" if instance else None,
            commit_interval_s=service_settings.commit_interval_s,
        )
        return loop

    def details() -> dict[str, Any]:
        return {"tables": len(loop.registry) if loop else 0}

    serve_loop(
        SERVICE, service_settings, settings=settings, topics=TOPICS, build=build, details=details
    )


if __name__ == "__main__":
    main()
