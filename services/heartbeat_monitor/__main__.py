"""``python -m services.heartbeat_monitor``: run heartbeat-monitor until SIGTERM.

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
import time
from typing import Any, NoReturn

from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource

from lakewarden.clients.liveness import SERVICE
from lakewarden.errors import LakewardenError
from lakewarden.events.topics import HEARTBEATS, ensure_topics
from services._common import HealthServer, setup_logging
from services._common.runner import run_loop_until_signalled
from services.heartbeat_monitor.app import (
    TOPICS,
    group_id,
    monitor,
    service_settings,
    settings,
    topics,
    tracker,
)
from services.heartbeat_monitor.worker import Worker

log = logging.getLogger(__name__)


def main() -> NoReturn:
    setup_logging(SERVICE, service_settings.log_level)  # 1.
    try:
        ensure_topics(settings, specs=TOPICS)  # 2.
    except LakewardenError as err:
        log.error("cannot start: %s", err, extra={"service": SERVICE})
        raise SystemExit(2) from err
    _warn_unless_log_append_time()
    started = time.monotonic()
    worker = Worker(
        settings,
        monitor,
        topics,
        group_id=group_id,
        group_instance_id=(
            f"{SERVICE}-{service_settings.instance_id}" if service_settings.instance_id else None
        ),
        tick_s=settings.heartbeat.monitor_tick_s,
    )

    def probe() -> tuple[bool, dict[str, Any]]:
        healthy, membership = worker.membership.health()
        return healthy, {
            "service": SERVICE,
            **membership,
            "uptime_s": round(time.monotonic() - started, 1),
            "rebalances": worker.rebalances,
            "instants": len(tracker),
            "partitions_in_grace": tracker.partitions_in_grace(),
        }

    health = HealthServer(service_settings.health_port, probe)
    worker.on_ready = health.start  # 4.
    run_loop_until_signalled(SERVICE, worker.run, health)  # 3.


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
