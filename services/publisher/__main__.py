"""``python -m lakewarden_services.publisher``: run the publisher until SIGTERM.

Environment: ``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS`` (required), ``LAKEWARDEN_KAFKA__TOPIC_PREFIX``,
``LAKEWARDEN_S3__*`` (tables on S3), ``LAKEWARDEN_HEALTH_PORT`` (health and metrics on
127.0.0.1), ``LAKEWARDEN_INSTANCE_ID`` (static group membership: a restart takes its
partitions back at once), ``LAKEWARDEN_COMMIT_INTERVAL_S``, ``LAKEWARDEN_LOG_LEVEL``,
``LAKEWARDEN_PUBLISHER_SWEEP_INTERVAL_S`` (default 30) and ``LAKEWARDEN_PUBLISHER_CONCURRENCY``
(tables synced at once, default 8).

Steps (``_common.runner``): 1. logfmt logging; 2. the topics exist (created idempotently, the
registry's changelog compacted); 3. the sync threads start and the Kafka loop runs;
SIGTERM/SIGINT stop the loop (producer flushed, offsets committed, group left); 4. once the
first assignment and its recovery completed, the health endpoint listens.
"""

from __future__ import annotations

from typing import NoReturn

from lakewarden_services._common.table_loop import serve_tables
from lakewarden_services.publisher.app import publisher_settings, service_settings, settings
from lakewarden_services.publisher.handler import PublishQueue
from lakewarden_services.publisher.loop import PUBLISHER
from lakewarden_services.publisher.worker import PublishWorker


def main() -> NoReturn:
    serve_tables(
        PUBLISHER,
        settings,
        service_settings,
        queue=PublishQueue(),
        work=PublishWorker(settings).sync,
        threads=publisher_settings.concurrency,
        sweep_interval_s=publisher_settings.sweep_interval_s,
    )


if __name__ == "__main__":
    main()
