"""The faust app of heartbeat-monitor: its topics and its table, declared at module top.

The table ``liveness`` holds one record per tracked instant (``lakewarden.clients.liveness``
defines the format), partitioned like ``heartbeats``, backed by the compacted changelog
``<prefix>heartbeat-monitor-liveness-changelog`` that ``Liveness`` views read. It is written
only when a verdict changes (first beat, death, end, forgetting), never per beat: the last-seen
times live in the tracker, in memory, and a restart gives every instant a fresh tolerance.
"""

from __future__ import annotations

import uuid

import faust

from lakewarden.clients.liveness import SERVICE, TABLE_NAME
from lakewarden.events.faust_codec import CODEC_NAME
from lakewarden.events.topics import DLQ, HEARTBEAT_EXPIRED, HEARTBEATS, TIMELINE
from lakewarden.settings import Settings
from services._common import DeadLetters, Lifecycle, ServiceSettings, make_app
from services.heartbeat_monitor.tracker import Tracker

TOPICS = (HEARTBEATS, HEARTBEAT_EXPIRED, TIMELINE)

settings = Settings()
service_settings = ServiceSettings()
# Who sends the ticks: unique per process, so a restarted monitor waits for its own.
instance_id = f"{SERVICE}-{service_settings.instance_id or 'x'}-{uuid.uuid4().hex[:8]}"

app = make_app(
    SERVICE,
    settings,
    partitions=HEARTBEATS.partitions,
    instance_id=service_settings.instance_id,
)
lifecycle = Lifecycle(app, SERVICE)

heartbeats_topic = app.topic(
    HEARTBEATS.name(settings), key_serializer="raw", value_serializer=CODEC_NAME
)
timeline_topic = app.topic(
    TIMELINE.name(settings), key_serializer="raw", value_serializer=CODEC_NAME
)
expired_topic = app.topic(
    HEARTBEAT_EXPIRED.name(settings), key_serializer="raw", value_serializer=CODEC_NAME
)
dlq_topic = app.topic(DLQ.name(settings), key_serializer="raw", value_serializer=CODEC_NAME)

liveness = app.Table(
    TABLE_NAME,
    default=None,
    schema=faust.Schema(key_serializer="raw", value_serializer="raw"),
    partitions=HEARTBEATS.partitions,
)

dead_letters = DeadLetters(dlq_topic, service=SERVICE, consumer_group=app.conf.id)
tracker = Tracker(
    instance_id=instance_id,
    forget_after_ms=round(settings.heartbeat.forget_after_s * 1000),
)
