"""The faust app of the cleaner: topics, the ``tables`` registry, declared at module top.

``tables`` maps a table id to ``{"uri", "partition"}``: where the table lives and the
``clean.requests`` partition that registered it, which is the partition (hence the instance)
that owns it. It is changelogged, so a rebalance moves it with the partition.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import faust

from lakewarden.events.topics import CLEAN_REQUESTS, DLQ, HEARTBEAT_EXPIRED, TIMELINE
from lakewarden.settings import Settings
from services._common import DeadLetters, Lifecycle, ServiceSettings, event_topic, make_app
from services.cleaner.queue import CleanQueue
from services.cleaner.settings import CleanerSettings

SERVICE = "cleaner"
TOPICS = (CLEAN_REQUESTS, TIMELINE, HEARTBEAT_EXPIRED)

settings = Settings()
service_settings = ServiceSettings()
cleaner_settings = CleanerSettings()
app = make_app(
    SERVICE,
    settings,
    partitions=CLEAN_REQUESTS.partitions,
    instance_id=service_settings.instance_id,
    commit_interval_s=service_settings.commit_interval_s,
)
lifecycle = Lifecycle(app, SERVICE)

requests_topic = event_topic(app, CLEAN_REQUESTS, settings)
timeline_topic = event_topic(app, TIMELINE, settings)
expired_topic = event_topic(app, HEARTBEAT_EXPIRED, settings)
dlq_topic = event_topic(app, DLQ, settings)

dead_letters = DeadLetters(dlq_topic, service=SERVICE, consumer_group=app.conf.id)

tables = app.Table(
    "tables",
    default=None,
    schema=faust.Schema(key_serializer="json", value_serializer="json"),
    partitions=CLEAN_REQUESTS.partitions,
)

queue = CleanQueue()
# Cleans block (storage calls, the table lock): one at a time, off the event loop.
clean_pool = ThreadPoolExecutor(1, thread_name_prefix="clean")
