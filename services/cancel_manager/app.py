"""The faust app of cancel-manager: its topics and the ``tables`` registry, declared at module
top. Storage holds the timeline; ``tables`` maps a table id to the URI a request named, so
that a ``HeartbeatExpired`` (which names no URI) can be acted on, also after a restart or a
rebalance: it is changelogged and partitioned like ``cancel.requests`` (and
``heartbeat.expired``, which has as many partitions and the same keys, so the instance that
gets a table's expiries owns its registration)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import faust

from lakewarden.events.topics import (
    CANCEL_REQUESTS,
    CANCEL_RESULTS,
    DLQ,
    HEARTBEAT_EXPIRED,
    TIMELINE,
)
from lakewarden.settings import Settings
from services._common import DeadLetters, Lifecycle, ServiceSettings, event_topic, make_app
from services._common.acked_table import acked_table

SERVICE = "cancel-manager"
TOPICS = (CANCEL_REQUESTS, CANCEL_RESULTS, HEARTBEAT_EXPIRED, TIMELINE)

settings = Settings()
service_settings = ServiceSettings()
app = make_app(
    SERVICE,
    settings,
    partitions=CANCEL_REQUESTS.partitions,
    instance_id=service_settings.instance_id,
    commit_interval_s=service_settings.commit_interval_s,
)
lifecycle = Lifecycle(app, SERVICE)

requests_topic = event_topic(app, CANCEL_REQUESTS, settings)
results_topic = event_topic(app, CANCEL_RESULTS, settings)
expired_topic = event_topic(app, HEARTBEAT_EXPIRED, settings)
timeline_topic = event_topic(app, TIMELINE, settings)
dlq_topic = event_topic(app, DLQ, settings)

dead_letters = DeadLetters(dlq_topic, service=SERVICE, consumer_group=app.conf.id)

# Acknowledged by the broker before the request that registered a URI is done (AckedTable).
tables = acked_table(
    app,
    "tables",
    default=None,
    schema=faust.Schema(key_serializer="json", value_serializer="json"),
    partitions=CANCEL_REQUESTS.partitions,
)

# Cancel steps block (storage, the table lock): one at a time, off the event loop.
cancel_pool = ThreadPoolExecutor(1, thread_name_prefix="cancel")
