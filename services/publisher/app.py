"""The faust app of the publisher: topics, the ``tables`` registry, declared at module top.

``tables`` maps a table id to ``{"uri", "partition"}``: where the table lives and the
``clean.requests`` partition that registered it (the partition, hence the instance, that owns
it). It is changelogged, so a rebalance moves it with the partition, and a registration is
acknowledged by the broker before its event is (``AckedTable``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import faust

from lakewarden.events.topics import CLEAN_REQUESTS, DLQ, TIMELINE
from lakewarden.settings import Settings
from lakewarden_services._common import (
    DeadLetters,
    Lifecycle,
    ServiceSettings,
    event_topic,
    make_app,
)
from lakewarden_services._common.acked_table import acked_table
from lakewarden_services.publisher.handler import PublishQueue
from lakewarden_services.publisher.settings import PublisherSettings

SERVICE = "publisher"
TOPICS = (CLEAN_REQUESTS, TIMELINE)

settings = Settings()
service_settings = ServiceSettings()
publisher_settings = PublisherSettings()
app = make_app(
    SERVICE,
    settings,
    partitions=CLEAN_REQUESTS.partitions,
    instance_id=service_settings.instance_id,
    commit_interval_s=service_settings.commit_interval_s,
)
lifecycle = Lifecycle(app, SERVICE)

registrations_topic = event_topic(app, CLEAN_REQUESTS, settings)
timeline_topic = event_topic(app, TIMELINE, settings)
dlq_topic = event_topic(app, DLQ, settings)

dead_letters = DeadLetters(dlq_topic, service=SERVICE, consumer_group=app.conf.id)

tables = acked_table(
    app,
    "tables",
    default=None,
    schema=faust.Schema(key_serializer="json", value_serializer="json"),
    partitions=CLEAN_REQUESTS.partitions,
)

queue = PublishQueue()
# Syncs block (storage calls): off the event loop, up to ``concurrency`` tables at once.
publish_pool = ThreadPoolExecutor(publisher_settings.concurrency, thread_name_prefix="publish")
