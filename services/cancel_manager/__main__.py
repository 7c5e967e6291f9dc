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
import time
from typing import Any, NoReturn

from lakewarden.errors import LakewardenError
from lakewarden.events.topics import ensure_topics
from lakewarden.table import Coordinator, connect
from services._common import HealthServer, setup_logging
from services._common.runner import run_loop_until_signalled
from services.cancel_manager.app import SERVICE, TOPICS, group_id, service_settings, settings
from services.cancel_manager.loop import Loop

log = logging.getLogger(__name__)


@functools.cache
def _coordinator() -> Coordinator:
    # timeline-lock's lease and heartbeat-monitor's liveness: Kafka or refuse. Built on the
    # first event, on the loop's thread: no network IO before the loop runs.
    return connect(settings, require_kafka=True).coordinator


def main() -> NoReturn:
    setup_logging(SERVICE, service_settings.log_level)  # 1.
    try:
        ensure_topics(settings, specs=TOPICS)  # 2.
    except LakewardenError as err:
        log.error("cannot start: %s", err, extra={"service": SERVICE})
        raise SystemExit(2) from err
    started = time.monotonic()
    instance = service_settings.instance_id
    loop = Loop(
        settings,
        _coordinator,
        group_id=group_id,
        group_instance_id=f"{SERVICE}-{instance}" if instance else None,
        commit_interval_s=service_settings.commit_interval_s,
    )

    def probe() -> tuple[bool, dict[str, Any]]:
        healthy, membership = loop.membership.health()
        return healthy, {
            "service": SERVICE,
            **membership,
            "uptime_s": round(time.monotonic() - started, 1),
            "rebalances": loop.rebalances,
            "tables": len(loop.registry),
        }

    health = HealthServer(service_settings.health_port, probe)
    loop.on_ready = health.start  # 4.
    run_loop_until_signalled(SERVICE, loop.run, health)  # 3.


if __name__ == "__main__":
    main()
