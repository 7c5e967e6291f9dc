"""cancel-manager, declared: its settings, topics and group.

``tables`` (table id -> the URI a request named, ``_common.registry.TablesRegistry``) lives
in memory for the partitions this instance owns and in the compacted changelog topic
``<prefix>cancel-manager-tables-changelog``, partitioned like ``cancel.requests`` and
``heartbeat.expired`` (same partition count, same keys; the loop's ``range`` assignment gives
one instance partition P of both), so the instance that gets a table's expiries owns its
registration. The topic's name and record format are those the faust version of the service
wrote (its ``tables`` table's changelog), so its state carries over.

The Kafka loop is ``loop.Loop`` (plain confluent-kafka; its module doc says why).
"""

from __future__ import annotations

from typing import Final

from lakewarden.events.topics import (
    CANCEL_REQUESTS,
    CANCEL_RESULTS,
    DLQ,
    FOREVER,
    HEARTBEAT_EXPIRED,
    TIMELINE,
    TopicSpec,
)
from lakewarden.settings import Settings
from lakewarden_services._common import ServiceSettings

SERVICE: Final = "cancel-manager"
TABLES_CHANGELOG: Final = TopicSpec(
    f"{SERVICE}-tables-changelog", CANCEL_REQUESTS.partitions, FOREVER, cleanup_policy="compact"
)
TOPICS: Final = (
    CANCEL_REQUESTS,
    CANCEL_RESULTS,
    HEARTBEAT_EXPIRED,
    TIMELINE,
    TABLES_CHANGELOG,
    DLQ,
)

settings = Settings()
service_settings = ServiceSettings()
group_id = f"{settings.kafka.topic_prefix}{SERVICE}"
