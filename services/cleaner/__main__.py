"""``python -m lakewarden_services.cleaner``: run the cleaner until SIGTERM.

Environment: ``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS`` (required), ``LAKEWARDEN_KAFKA__TOPIC_PREFIX``,
``LAKEWARDEN_S3__*`` (tables on S3), ``LAKEWARDEN_HEALTH_PORT`` (health and metrics on
127.0.0.1), ``LAKEWARDEN_INSTANCE_ID`` (static group membership: a restart takes its
partitions back at once), ``LAKEWARDEN_COMMIT_INTERVAL_S``, ``LAKEWARDEN_LOG_LEVEL``,
``LAKEWARDEN_CLEANER_SWEEP_INTERVAL_S`` (default 60) and the hooks of
``lakewarden_services.cleaner.settings``. The table lock comes from timeline-lock and liveness
from heartbeat-monitor, which must be running.

Steps (``_common.runner``): 1. logfmt logging; 2. the topics exist (created idempotently, the
registry's changelog compacted); 3. the clean thread starts and the Kafka loop runs;
SIGTERM/SIGINT stop the loop (producer flushed, offsets committed, group left); 4. once the
first assignment and its recovery completed, the health endpoint listens. Once the topics
exist, a thread connects the clean's Kafka clients (``CleanWorker.warm_up``) so that the first
clean does not wait for them.
"""

from __future__ import annotations

import functools
from typing import NoReturn

from lakewarden.table import Coordinator, connect
from lakewarden_services._common.table_loop import serve_tables
from lakewarden_services.cleaner.app import cleaner_settings, service_settings, settings
from lakewarden_services.cleaner.loop import CLEANER
from lakewarden_services.cleaner.queue import CleanQueue
from lakewarden_services.cleaner.worker import CleanWorker


@functools.cache
def _coordinator() -> Coordinator:
    # The table lock is timeline-lock's lease, liveness heartbeat-monitor's: Kafka or refuse.
    # Built on the first clean, on the clean thread: no network IO before the loop runs.
    return connect(settings, require_kafka=True).coordinator


def main() -> NoReturn:
    instance = service_settings.instance_id or "0"
    worker = CleanWorker(settings, _coordinator, cleaner_settings, instance=instance)
    serve_tables(
        CLEANER,
        settings,
        service_settings,
        queue=CleanQueue(),
        work=worker.clean,
        threads=1,
        sweep_interval_s=cleaner_settings.sweep_interval_s,
        warm_up=worker.warm_up,
    )


if __name__ == "__main__":
    main()
