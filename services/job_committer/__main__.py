"""``python -m lakewarden_services.job_committer``: run job-committer until SIGTERM.

Environment: ``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS`` (required), ``LAKEWARDEN_KAFKA__TOPIC_PREFIX``,
``LAKEWARDEN_S3__*`` (tables on S3), ``LAKEWARDEN_HEALTH_PORT`` (health and metrics on
127.0.0.1), ``LAKEWARDEN_INSTANCE_ID`` (static group membership), ``LAKEWARDEN_COMMIT_INTERVAL_S``,
``LAKEWARDEN_LOG_LEVEL``, ``LAKEWARDEN_JOB_COMMITTER_*`` (``held.HeldManifestSettings``); tests'
faults in ``LAKEWARDEN_FAULT_PLAN`` (``lakewarden.faults``). The table lock comes from the
timeline-lock service, which must be running.

Steps (``_common.runner``): 1. logfmt logging; 2. the topics exist; 3. the loop runs;
SIGTERM/SIGINT stop it (the commit in progress finished and answered, the producer flushed,
offsets committed, group left), then the worker's committer threads stop; 4. once the first
assignment completed, the health endpoint listens.
"""

from __future__ import annotations

import functools
from typing import Any, NoReturn

from lakewarden.table import Connection, connect
from lakewarden_services._common.loop_service import serve_loop
from lakewarden_services.job_committer.app import (
    SERVICE,
    TOPICS,
    held_settings,
    service_settings,
    settings,
)
from lakewarden_services.job_committer.held import HeldManifests
from lakewarden_services.job_committer.loop import Loop
from lakewarden_services.job_committer.worker import CommitWorker


@functools.cache
def _connection() -> Connection:
    # The table lock is timeline-lock's lease: Kafka or refuse (no embedded fallback). Made
    # on the first commit, on the commit thread: no network IO before the loop runs.
    return connect(settings, require_kafka=True)


def main() -> NoReturn:
    # Both outlive a loop built again after a fatal consumer error (``RebuildingLoop``).
    worker = CommitWorker(settings, _connection)
    held = HeldManifests(
        max_bytes=held_settings.held_manifest_bytes, max_age_s=held_settings.held_manifest_age_s
    )

    def build() -> Loop:
        return Loop(
            settings,
            worker,
            held,
            group=service_settings.group(SERVICE, settings),
            commit_interval_s=service_settings.commit_interval_s,
            manifest_wait_s=held_settings.manifest_wait_s,
        )

    def details(loop: Loop) -> dict[str, Any]:
        return {**loop.pending(), "held_manifest_bytes": held.size}

    try:
        serve_loop(
            SERVICE,
            service_settings,
            settings=settings,
            topics=TOPICS,
            build=build,
            details=details,
        )
    finally:  # the loop stopped (its commit in progress finished): no commit uses the threads
        worker.close()


if __name__ == "__main__":
    main()
