"""The faust app of timeline-lock: its topics and its table, declared at module top.

The table ``locks`` maps table id -> a stored ``TableLock`` (``state_json``); it is partitioned like
``lock.requests`` (a table's lock lives in the partition its requests arrive on) and backed
by the changelog topic ``<prefix>timeline-lock-locks-changelog``, so the locks, and above all
each table's ``last_token``, survive restarts and rebalances.
"""

from __future__ import annotations

import faust

from lakewarden.events.faust_codec import CODEC_NAME
from lakewarden.events.topics import DLQ, LOCK_REPLIES, LOCK_REQUESTS
from lakewarden.settings import Settings
from services._common import DeadLetters, Lifecycle, ServiceSettings, make_app

SERVICE = "timeline-lock"
TOPICS = (LOCK_REQUESTS, LOCK_REPLIES)

settings = Settings()
service_settings = ServiceSettings()
app = make_app(
    SERVICE,
    settings,
    partitions=LOCK_REQUESTS.partitions,
    instance_id=service_settings.instance_id,
    commit_interval_s=service_settings.commit_interval_s,
)
lifecycle = Lifecycle(app, SERVICE)

requests_topic = app.topic(
    LOCK_REQUESTS.name(settings), key_serializer="raw", value_serializer=CODEC_NAME
)
replies_topic = app.topic(
    LOCK_REPLIES.name(settings), key_serializer="raw", value_serializer=CODEC_NAME
)
dlq_topic = app.topic(DLQ.name(settings), key_serializer="raw", value_serializer=CODEC_NAME)

locks = app.Table(
    "locks",
    default=None,
    schema=faust.Schema(key_serializer="json", value_serializer="json"),
    partitions=LOCK_REQUESTS.partitions,
)

dead_letters = DeadLetters(dlq_topic, service=SERVICE, consumer_group=app.conf.id)
