"""The cleaner, declared: its settings, topics and group.

``tables`` (table id -> ``{"uri", "partition"}``: where the table lives and the
``clean.requests`` partition that registered it, ``_common.registry.TablesRegistry``) lives in
memory for the partitions this instance owns and in the compacted changelog topic
``<prefix>cleaner-tables-changelog``, partitioned like ``clean.requests``: the instance that
owns partition P of ``clean.requests`` owns the tables registered there and reads their
records back when it is assigned P. The topic's name and record format (key and value JSON)
are those the faust version of the service wrote (its ``tables`` table's changelog), so its
state carries over.

The Kafka loop is ``_common.table_loop.TableLoop`` (``loop.CLEANER``, run by
``table_loop.serve_tables``); cleans run on one thread beside it.
"""

from __future__ import annotations

from typing import Final

from lakewarden.events.topics import (
    CLEAN_REQUESTS,
    DLQ,
    FOREVER,
    HEARTBEAT_EXPIRED,
    TIMELINE,
    TopicSpec,
)
from lakewarden.settings import Settings
from lakewarden_services._common import ServiceSettings
from lakewarden_services.cleaner.settings import CleanerSettings

SERVICE: Final = "cleaner"
TABLES_CHANGELOG: Final = TopicSpec(
    f"{SERVICE}-tables-changelog", CLEAN_REQUESTS.partitions, FOREVER, cleanup_policy="compact"
)
TOPICS: Final = (CLEAN_REQUESTS, TIMELINE, HEARTBEAT_EXPIRED, TABLES_CHANGELOG, DLQ)

settings = Settings()
service_settings = ServiceSettings()
cleaner_settings = CleanerSettings()
