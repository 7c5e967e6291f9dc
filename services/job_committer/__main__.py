"""``python -m lakewarden_services.job_committer``: run job-committer until SIGTERM.

Environment: ``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS`` (required), ``LAKEWARDEN_KAFKA__TOPIC_PREFIX``,
``LAKEWARDEN_S3__*`` (tables on S3), ``LAKEWARDEN_STATE_DIR``, ``LAKEWARDEN_HEALTH_PORT``
(health and metrics on 127.0.0.1), ``LAKEWARDEN_INSTANCE_ID`` (static group membership),
``LAKEWARDEN_LOG_LEVEL``; tests' faults in ``LAKEWARDEN_FAULT_PLAN`` (``lakewarden.faults``).
The table lock comes from the timeline-lock service, which must be running.
"""

from __future__ import annotations

from lakewarden_services._common import run_service
from lakewarden_services.job_committer import agents  # noqa: F401  (declares the agents)
from lakewarden_services.job_committer.app import TOPICS, app, lifecycle, service_settings, settings


def main() -> None:
    run_service(app, lifecycle, settings=settings, topics=TOPICS, service_settings=service_settings)


if __name__ == "__main__":
    main()
