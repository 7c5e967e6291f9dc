"""``python -m lakewarden_services.error_sink``: run the error-table sink until SIGTERM.

Environment: ``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS`` (required), ``LAKEWARDEN_KAFKA__TOPIC_PREFIX``,
``LAKEWARDEN_S3__*`` (tables on S3), ``LAKEWARDEN_ERROR_TABLE__NAME`` /
``LAKEWARDEN_ERROR_TABLE__BASE_PATH`` (global mode; else each table's ``<root>_errors``),
``LAKEWARDEN_HEALTH_PORT``, ``LAKEWARDEN_INSTANCE_ID``, ``LAKEWARDEN_LOG_LEVEL``, and
``SinkSettings`` (``LAKEWARDEN_ERROR_SINK_*``).

Steps: 1. logfmt logging; 2. the topics exist (the coordinator's too) and the coordinator is
timeline-lock's (no Kafka: exit 2, never the embedded coordinator: the sink's commits take the
same table lock as every other writer); 3. the sink runs (SIGTERM/SIGINT stop it: offsets
committed, group left, coordinator closed); 4. once the first assignment completed, health listens.
"""

from __future__ import annotations

import logging
import time
from typing import Any, NoReturn

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from lakewarden.clients.kafka_coordinator import COORDINATOR_TOPICS
from lakewarden.errors import LakewardenError
from lakewarden.events.topics import DLQ, ERRORS, ensure_topics
from lakewarden.settings import Settings
from lakewarden.table import Connection, connect
from lakewarden_services._common import HealthServer, ServiceSettings, setup_logging
from lakewarden_services._common.runner import run_loop_until_signalled
from lakewarden_services.error_sink.sink import SERVICE, ErrorSink, SinkOptions

log = logging.getLogger(__name__)


class SinkSettings(BaseSettings):
    """error-sink's own knobs (``LAKEWARDEN_ERROR_SINK_<FIELD>``)."""

    model_config = SettingsConfigDict(
        env_prefix="LAKEWARDEN_ERROR_SINK_", frozen=True, extra="ignore"
    )

    check_interval_s: float = Field(
        default=1.0, gt=0, description="how often buffered records' main instants are checked"
    )
    give_up_after_s: float = Field(
        default=900.0,
        ge=0,
        description="records whose instant is not found (no such table, never on the "
        "timeline) for this long, and for give_up_after_checks checks, are dead-lettered",
    )
    give_up_after_checks: int = Field(
        default=30, ge=1, description="see give_up_after_s (both bounds must pass)"
    )
    fallback_check_s: float = Field(
        default=10.0,
        gt=0,
        description="a buffered instant that no timeline or job.results event said ended is "
        "read from storage this often (an ended one is read at the next check)",
    )


def _start(settings: Settings) -> Connection:
    """Step 2. Raises: LakewardenError (no Kafka, topics not creatable)."""
    ensure_topics(settings, specs=(ERRORS, DLQ, *COORDINATOR_TOPICS))
    return connect(settings, require_kafka=True)


def main() -> NoReturn:
    settings = Settings()
    service_settings = ServiceSettings()
    sink_settings = SinkSettings()
    setup_logging(SERVICE, service_settings.log_level)  # 1.
    try:
        connection = _start(settings)  # 2.
    except LakewardenError as err:
        log.error("cannot start: %s", err, extra={"service": SERVICE})
        raise SystemExit(2) from err
    instance = service_settings.instance_id
    options = SinkOptions(
        errors_topic=ERRORS.name(settings),
        dlq_topic=DLQ.name(settings),
        group_id=f"{settings.kafka.topic_prefix}{SERVICE}",
        group_instance_id=f"{SERVICE}-{instance}" if instance else None,
        check_interval_s=sink_settings.check_interval_s,
        give_up_after_s=sink_settings.give_up_after_s,
        give_up_after_checks=sink_settings.give_up_after_checks,
        fallback_check_s=sink_settings.fallback_check_s,
    )
    started = time.monotonic()
    sink = ErrorSink(settings, options, coordinator=connection.coordinator)

    def probe() -> tuple[bool, dict[str, Any]]:
        return sink.ready, {
            "service": SERVICE,
            "status": "ok" if sink.ready else "starting",
            "uptime_s": round(time.monotonic() - started, 1),
            "buffered_records": len(sink.buffer),
            "unresolved_sources": len(sink.unresolved),
            "committed_instants": sink.committed_instants,
        }

    health = HealthServer(service_settings.health_port, probe)
    sink.on_ready = health.start  # 4.
    with connection:
        run_loop_until_signalled(SERVICE, sink.run, health)  # 3.


if __name__ == "__main__":
    main()
