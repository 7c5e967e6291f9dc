"""``python -m services.timeline_lock``: run timeline-lock until SIGTERM.

Environment: ``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS`` (required), ``LAKEWARDEN_KAFKA__TOPIC_PREFIX``,
``LAKEWARDEN_STATE_DIR``, ``LAKEWARDEN_HEALTH_PORT`` (health and metrics on 127.0.0.1),
``LAKEWARDEN_INSTANCE_ID`` (static group membership: a restart takes its partitions back at
once), ``LAKEWARDEN_LOG_LEVEL``.
"""

from __future__ import annotations

from services._common import run_service
from services.timeline_lock import agents  # noqa: F401  (declares the agent and the timer)
from services.timeline_lock.app import TOPICS, app, lifecycle, service_settings, settings


def main() -> None:
    run_service(app, lifecycle, settings=settings, topics=TOPICS, service_settings=service_settings)


if __name__ == "__main__":
    main()
