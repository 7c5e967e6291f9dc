"""``python -m services.timeline_lock``: run timeline-lock until SIGTERM.

Environment: ``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS`` (required), ``LAKEWARDEN_KAFKA__TOPIC_PREFIX``,
``LAKEWARDEN_HEALTH_PORT`` (health and metrics on 127.0.0.1), ``LAKEWARDEN_INSTANCE_ID``
(static group membership: a restart takes its partitions back at once),
``LAKEWARDEN_COMMIT_INTERVAL_S`` (how often offsets are committed), ``LAKEWARDEN_LOG_LEVEL``.

Steps: 1. logfmt logging; 2. the topics exist (created idempotently, the changelog compacted);
3. the worker runs; SIGTERM/SIGINT stop it (offsets committed, group left); 4. once the first
assignment and its recovery completed, the health endpoint listens.
"""

from __future__ import annotations

import logging
import time
from typing import Any, NoReturn

from lakewarden.errors import LakewardenError
from lakewarden.events.topics import ensure_topics
from services._common import HealthServer, setup_logging
from services._common.runner import run_loop_until_signalled
from services.timeline_lock.app import TOPICS, group_id, service_settings, settings, topics
from services.timeline_lock.handler import SERVICE
from services.timeline_lock.worker import Worker

log = logging.getLogger(__name__)


def main() -> NoReturn:
    setup_logging(SERVICE, service_settings.log_level)  # 1.
    try:
        ensure_topics(settings, specs=TOPICS)  # 2.
    except LakewardenError as err:
        log.error("cannot start: %s", err, extra={"service": SERVICE})
        raise SystemExit(2) from err
    started = time.monotonic()
    instance = service_settings.instance_id
    worker = Worker(
        settings,
        topics,
        group_id=group_id,
        group_instance_id=f"{SERVICE}-{instance}" if instance else None,
        commit_interval_s=service_settings.commit_interval_s,
    )

    def probe() -> tuple[bool, dict[str, Any]]:
        healthy, membership = worker.membership.health()
        return healthy, {
            "service": SERVICE,
            **membership,
            "uptime_s": round(time.monotonic() - started, 1),
            "rebalances": worker.rebalances,
            "tables": len(worker.locks),
        }

    health = HealthServer(service_settings.health_port, probe)
    worker.on_ready = health.start  # 4.
    run_loop_until_signalled(SERVICE, worker.run, health)  # 3.


if __name__ == "__main__":
    main()
