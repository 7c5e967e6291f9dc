"""``python -m lakewarden_services.timeline_lock``: run timeline-lock until SIGTERM.

Environment: ``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS`` (required), ``LAKEWARDEN_KAFKA__TOPIC_PREFIX``,
``LAKEWARDEN_HEALTH_PORT`` (health and metrics on 127.0.0.1), ``LAKEWARDEN_INSTANCE_ID``
(static group membership: a restart takes its partitions back at once),
``LAKEWARDEN_COMMIT_INTERVAL_S`` (how often offsets are committed),
``LAKEWARDEN_LOCK_CHANGELOG_INTERVAL_S`` (how often changed locks are written to the changelog,
default 0.25 s), ``LAKEWARDEN_LOG_LEVEL``.

Steps: 1. logfmt logging; 2. the topics exist (created idempotently, the changelog compacted);
3. the worker runs; SIGTERM/SIGINT stop it (offsets committed, group left); 4. once the first
assignment and its recovery completed, the health endpoint listens.
"""

from __future__ import annotations

import logging
from typing import Any, NoReturn

from lakewarden_services._common.loop_service import serve_loop
from lakewarden_services.timeline_lock.app import (
    TOPICS,
    service_settings,
    settings,
    topics,
)
from lakewarden_services.timeline_lock.handler import SERVICE
from lakewarden_services.timeline_lock.loop import Worker

log = logging.getLogger(__name__)


def main() -> NoReturn:
    def build() -> Worker:
        return Worker(
            settings,
            topics,
            group=service_settings.group(SERVICE, settings),
            commit_interval_s=service_settings.commit_interval_s,
            changelog_interval_s=service_settings.lock_changelog_interval_s,
        )

    def details(worker: Worker) -> dict[str, Any]:
        return {"tables": len(worker.locks)}

    serve_loop(
        SERVICE, service_settings, settings=settings, topics=TOPICS, build=build, details=details
    )


if __name__ == "__main__":
    main()
