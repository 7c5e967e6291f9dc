"""``python -m services.error_sink``: run the error-table sink until SIGTERM.

Environment: ``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS`` (required), ``LAKEWARDEN_KAFKA__TOPIC_PREFIX``,
``LAKEWARDEN_S3__*`` (tables on S3), ``LAKEWARDEN_ERROR_TABLE__NAME`` /
``LAKEWARDEN_ERROR_TABLE__BASE_PATH`` (global mode; else each table's ``<root>_errors``),
``LAKEWARDEN_HEALTH_PORT``, ``LAKEWARDEN_INSTANCE_ID``, ``LAKEWARDEN_LOG_LEVEL``,
``LAKEWARDEN_ERROR_SINK_CHECK_INTERVAL_S`` (default 1). Tests only:
``LAKEWARDEN_ERROR_SINK_PAUSE_BEFORE_COMPLETE_S`` pauses every error-table commit after its
files are written (to kill the process mid-commit).

Steps: 1. logfmt logging; 2. the topics exist; 3. the sink runs (SIGTERM/SIGINT stop it:
offsets committed, group left); 4. once the first assignment completed, health listens.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, NoReturn

from lakewarden.errors import LakewardenError
from lakewarden.events.topics import DLQ, ERRORS, ensure_topics
from lakewarden.settings import Settings
from services._common import HealthServer, ServiceSettings, setup_logging
from services._common.runner import run_loop_until_signalled
from services.error_sink.sink import SERVICE, ErrorSink, SinkOptions

log = logging.getLogger(__name__)


def main() -> NoReturn:
    settings = Settings()
    service_settings = ServiceSettings()
    setup_logging(SERVICE, service_settings.log_level)  # 1.
    try:
        ensure_topics(settings, specs=(ERRORS, DLQ))  # 2.
    except LakewardenError as err:
        log.error("cannot start: %s", err, extra={"service": SERVICE})
        raise SystemExit(2) from err
    pause_s = float(os.environ.get("LAKEWARDEN_ERROR_SINK_PAUSE_BEFORE_COMPLETE_S", "0"))

    def pause(instant: str) -> None:
        log.info("pausing before completing", extra={"instant": instant})
        time.sleep(pause_s)

    instance = service_settings.instance_id
    options = SinkOptions(
        errors_topic=ERRORS.name(settings),
        dlq_topic=DLQ.name(settings),
        group_id=f"{settings.kafka.topic_prefix}{SERVICE}",
        group_instance_id=f"{SERVICE}-{instance}" if instance else None,
        check_interval_s=float(os.environ.get("LAKEWARDEN_ERROR_SINK_CHECK_INTERVAL_S", "1")),
        before_complete=pause if pause_s > 0 else None,
    )
    started = time.monotonic()
    sink = ErrorSink(settings, options)

    def probe() -> tuple[bool, dict[str, Any]]:
        return sink.ready, {
            "service": SERVICE,
            "status": "ok" if sink.ready else "starting",
            "uptime_s": round(time.monotonic() - started, 1),
            "buffered_records": len(sink.buffer),
            "committed_instants": sink.committed_instants,
        }

    health = HealthServer(service_settings.health_port, probe)
    sink.on_ready = health.start  # 4.
    run_loop_until_signalled(SERVICE, sink.run, health)  # 3.


if __name__ == "__main__":
    main()
