"""``python -m lakewarden_services.publisher``: run the publisher until SIGTERM.

Environment: ``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS`` (required), ``LAKEWARDEN_KAFKA__TOPIC_PREFIX``,
``LAKEWARDEN_S3__*`` (tables on S3), ``LAKEWARDEN_STATE_DIR``, ``LAKEWARDEN_HEALTH_PORT``
(health and metrics on 127.0.0.1), ``LAKEWARDEN_INSTANCE_ID`` (static group membership),
``LAKEWARDEN_LOG_LEVEL``, ``LAKEWARDEN_PUBLISHER_SWEEP_INTERVAL_S`` (default 30) and
``LAKEWARDEN_PUBLISHER_CONCURRENCY`` (tables synced at once, default 8).
"""

from __future__ import annotations

from lakewarden_services._common import run_service
from lakewarden_services.publisher import agents  # noqa: F401  (declares the agents)
from lakewarden_services.publisher.app import TOPICS, app, lifecycle, service_settings, settings


def main() -> None:
    run_service(app, lifecycle, settings=settings, topics=TOPICS, service_settings=service_settings)


if __name__ == "__main__":
    main()
