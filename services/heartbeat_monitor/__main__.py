"""``python -m services.heartbeat_monitor``: run heartbeat-monitor until SIGTERM.

Environment: ``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS`` (required), ``LAKEWARDEN_KAFKA__TOPIC_PREFIX``,
``LAKEWARDEN_STATE_DIR``, ``LAKEWARDEN_HEALTH_PORT`` (health and metrics on 127.0.0.1),
``LAKEWARDEN_INSTANCE_ID`` (static group membership), ``LAKEWARDEN_LOG_LEVEL``,
``LAKEWARDEN_HEARTBEAT__MONITOR_TICK_S`` and ``LAKEWARDEN_HEARTBEAT__FORGET_AFTER_S``.
"""

from __future__ import annotations

from services._common import run_service
from services.heartbeat_monitor import agents  # noqa: F401  (declares agents, timer, hooks)
from services.heartbeat_monitor.app import TOPICS, app, lifecycle, service_settings, settings


def main() -> None:
    run_service(app, lifecycle, settings=settings, topics=TOPICS, service_settings=service_settings)


if __name__ == "__main__":
    main()
