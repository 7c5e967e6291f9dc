"""heartbeat-monitor, declared: its settings, topics, tracker, monitor and metrics wiring.

The liveness state is a compacted topic, ``<prefix>heartbeat-monitor-liveness-changelog``,
partitioned like ``heartbeats`` (one record per tracked instant, in its heartbeats partition;
``lakewarden.clients.liveness`` defines the format and reads it). It is written only when a
verdict changes (first beat, death, end, forgetting), never per beat: last-seen times live in
the tracker, in memory, and a restart gives every instant a fresh tolerance (the grace).

The Kafka loop is ``worker.Worker`` (plain confluent-kafka rather than a faust agent; its
module doc says why).
"""

from __future__ import annotations

import uuid
from functools import partial
from typing import Final

from lakewarden.clients.liveness import LIVENESS_CHANGELOG, SERVICE
from lakewarden.events.topics import DLQ, HEARTBEAT_EXPIRED, HEARTBEATS, TIMELINE
from lakewarden.settings import Settings
from lakewarden_services._common import ServiceSettings
from lakewarden_services.heartbeat_monitor import metrics
from lakewarden_services.heartbeat_monitor.loop import Topics
from lakewarden_services.heartbeat_monitor.monitor import Monitor, wall_clock_ms
from lakewarden_services.heartbeat_monitor.tracker import Tracker

TOPICS: Final = (HEARTBEATS, HEARTBEAT_EXPIRED, TIMELINE, LIVENESS_CHANGELOG, DLQ)

settings = Settings()
service_settings = ServiceSettings()
group_id = f"{settings.kafka.topic_prefix}{SERVICE}"
# Who sends the ticks: unique per process, so a restarted monitor waits for its own.
instance_id = f"{SERVICE}-{service_settings.instance_id or 'x'}-{uuid.uuid4().hex[:8]}"

tracker = Tracker(
    instance_id=instance_id, forget_after_ms=round(settings.heartbeat.forget_after_s * 1000)
)
monitor = Monitor(tracker=tracker, table={}, producer_id=instance_id, consumer_group=group_id)
topics = Topics(
    heartbeats=HEARTBEATS.name(settings),
    timeline=TIMELINE.name(settings),
    expired=HEARTBEAT_EXPIRED.name(settings),
    dlq=DLQ.name(settings),
    changelog=LIVENESS_CHANGELOG.name(settings),
    partitions=HEARTBEATS.partitions,
    expired_partitions=HEARTBEAT_EXPIRED.partitions,
)


def _consumer_lag_s() -> float:
    last = monitor.last_broker_ms
    return 0.0 if last is None else max(wall_clock_ms() - last, 0) / 1000


# Gauges are read at scrape time (on the health server's thread: plain reads only).
for _status in ("alive", "dead", "ended"):
    metrics.INSTANTS.labels(_status).set_function(partial(tracker.counts.__getitem__, _status))
metrics.IN_GRACE.set_function(tracker.partitions_in_grace)
metrics.CONSUMER_LAG.set_function(_consumer_lag_s)
