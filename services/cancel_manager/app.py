"""The faust app of cancel-manager: its topics, declared at module top. It keeps no faust
table: storage holds the timeline; the table URIs requests named are remembered in process
(``CancelWorker.tables``) so that a ``HeartbeatExpired`` can be acted on."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from lakewarden.events.topics import (
    CANCEL_REQUESTS,
    CANCEL_RESULTS,
    DLQ,
    HEARTBEAT_EXPIRED,
    TIMELINE,
)
from lakewarden.settings import Settings
from services._common import DeadLetters, Lifecycle, ServiceSettings, event_topic, make_app

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

# Cancel steps block (storage, the table lock): one at a time, off the event loop.
cancel_pool = ThreadPoolExecutor(1, thread_name_prefix="cancel")
