"""``python -m lakewarden_services.heartbeat_monitor``: run heartbeat-monitor until SIGTERM.

Environment: ``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS`` (required), ``LAKEWARDEN_KAFKA__TOPIC_PREFIX``,
``LAKEWARDEN_HEALTH_PORT`` (health and metrics on 127.0.0.1), ``LAKEWARDEN_INSTANCE_ID`` (static
group membership: a restarted instance takes its partitions back at once),
``LAKEWARDEN_LOG_LEVEL``, ``LAKEWARDEN_HEARTBEAT__MONITOR_TICK_S`` and
``LAKEWARDEN_HEARTBEAT__FORGET_AFTER_S``.

Steps: 1. logfmt logging; 2. the topics exist (created idempotently) and heartbeats are stamped
by the broker; 3. the worker runs; SIGTERM/SIGINT stop it (offsets committed, group left);
4. once the first assignment and its recovery completed, the health endpoint listens.
"""

from __future__ import annotations

import logging
from typing import Any, NoReturn

from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource

from lakewarden.clients.liveness import SERVICE
from lakewarden.events.topics import HEARTBEATS
from lakewarden_services._common.loop_service import serve_loop
from lakewarden_services.heartbeat_monitor.app import (
    TOPICS,
    monitor,
    service_settings,
    settings,
    topics,
    tracker,
)
from lakewarden_services.heartbeat_monitor.loop import Worker

log = logging.getLogger(__name__)


def main() -> NoReturn:
    def build() -> Worker:
        _warn_unless_log_append_time()
        return Worker(
            settings,
            monitor,
            topics,
            group=service_settings.group(SERVICE, settings),
            tick_s=settings.heartbeat.monitor_tick_s,
        )

    def details(worker: Worker) -> dict[str, Any]:
        return {"instants": len(tracker), "partitions_in_grace": tracker.partitions_in_grace()}

    serve_loop(
        SERVICE, service_settings, settings=settings, topics=TOPICS, build=build, details=details
    )


def _warn_unless_log_append_time() -> None:
    """Heartbeats must carry broker time; a topic created elsewhere may not (then each beat
    is judged by the monitor's clock on arrival, and counted in a metric)."""
    admin = AdminClient(settings.kafka.librdkafka_config(logger=log))
    resource = ConfigResource(ConfigResource.Type.TOPIC, HEARTBEATS.name(settings))
    try:
        configs = admin.describe_configs([resource])[resource].result(timeout=10)
    except Exception as err:  # a check, not a precondition: say so and go on
        log.warning("cannot read the heartbeats topic's configuration: %s", err)
        return
    entry = configs.get("message.timestamp.type")
    if entry is None or entry.value != "LogAppendTime":
        log.warning(
            "heartbeats are stamped by their producers, not the broker. Help: kafka-configs "
            "--alter --entity-type topics --entity-name %s --add-config "
            "message.timestamp.type=LogAppendTime",
            HEARTBEATS.name(settings),
        )


if __name__ == "__main__":
    main()
