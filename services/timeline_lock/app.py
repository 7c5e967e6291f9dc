"""timeline-lock, declared: its settings, topics and group.

The locks live in memory (``Worker.locks``: table id -> a stored ``TableLock``, see
``state_json``) and in the compacted changelog topic ``<prefix>timeline-lock-locks-changelog``,
partitioned like ``lock.requests`` (a table's lock lives in the partition its requests arrive
on), so the locks, and above all each table's ``last_token``, survive restarts and
rebalances. The name and the record format (key: the table id as a JSON string; value: the
stored lock as JSON) are those the faust version of the service wrote, so its state carries
over.

The Kafka loop is ``worker.Worker`` (plain confluent-kafka; its module doc says why).
"""

from __future__ import annotations

from typing import Final

from pydantic import Field

from lakewarden.events.topics import DLQ, FOREVER, LOCK_REPLIES, LOCK_REQUESTS, TopicSpec
from lakewarden.settings import Settings
from lakewarden_services._common import ServiceSettings
from lakewarden_services.timeline_lock.handler import SERVICE
from lakewarden_services.timeline_lock.loop import CHANGELOG_INTERVAL_S, Topics

LOCKS_CHANGELOG: Final = TopicSpec(
    f"{SERVICE}-locks-changelog", LOCK_REQUESTS.partitions, FOREVER, cleanup_policy="compact"
)
TOPICS: Final = (LOCK_REQUESTS, LOCK_REPLIES, LOCKS_CHANGELOG, DLQ)


class LockServiceSettings(ServiceSettings):
    """timeline-lock's process settings: the shared ones and how long a changed lock may wait
    for its changelog record (``LAKEWARDEN_LOCK_CHANGELOG_INTERVAL_S``, see ``deferred``)."""

    lock_changelog_interval_s: float = Field(
        default=CHANGELOG_INTERVAL_S,
        gt=0,
        description="how often changed locks are written to the changelog, off the request path",
    )


settings = Settings()
service_settings = LockServiceSettings()
group_id = f"{settings.kafka.topic_prefix}{SERVICE}"
topics = Topics(
    requests=LOCK_REQUESTS.name(settings),
    replies=LOCK_REPLIES.name(settings),
    changelog=LOCKS_CHANGELOG.name(settings),
    dlq=DLQ.name(settings),
    partitions=LOCK_REQUESTS.partitions,
    reply_partitions=LOCK_REPLIES.partitions,
)
