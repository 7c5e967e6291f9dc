"""The faust app of the cleaner: topics, the ``tables`` registry, declared at module top.

``tables`` maps a table id to ``{"uri", "partition"}``: where the table lives and the
``clean.requests`` partition that registered it, which is the partition (hence the instance)
that owns it. It is changelogged, so a rebalance moves it with the partition, and a
registration is acknowledged by the broker before its event is (``AckedTable``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import faust

from lakewarden.events.topics import CLEAN_REQUESTS, DLQ, HEARTBEAT_EXPIRED, TIMELINE
from lakewarden.settings import Settings
from lakewarden_services._common import (
    DeadLetters,
    Lifecycle,
    ServiceSettings,
    event_topic,
    make_app,
)
from lakewarden_services._common.acked_table import acked_table
from lakewarden_services.cleaner.queue import CleanQueue
from lakewarden_services.cleaner.settings import CleanerSettings

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

# An AckedTable: the agent waits until a registration is in the changelog before it takes the
# next event, so its offset is never committed ahead of the registration (see acked_table).
tables = acked_table(
    app,
    "tables",
    default=None,
    schema=faust.Schema(key_serializer="json", value_serializer="json"),
    partitions=CLEAN_REQUESTS.partitions,
)

queue = CleanQueue()
# Cleans block (storage calls, the table lock): one at a time, off the event loop.
clean_pool = ThreadPoolExecutor(1, thread_name_prefix="clean")
