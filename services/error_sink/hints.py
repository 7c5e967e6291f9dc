"""Which main instants ended, learnt from events: the ``timeline`` and ``job.results`` topics.

error-sink decides a buffered (table, instant) from storage: the timeline, then the job's
``_SUCCESS`` (the truth). What it needs from Kafka is *when* to look: a ``TimelineTransition``
that ends the instant (``completed``, ``rolled_back``, ``aborted``) or a ``JobCommitResult``
of it. ``TimelineHints`` reads both topics from their end (no consumer group: nothing is
committed, every sink instance sees every hint) and hands the sink the keys they name; the
sink reads storage for those at once, and for a key no event named only every
``fallback_check_s`` (events can be missed: a writer without Kafka, a sink that started after
the event, a publish that failed). A key seen for the first time is read at once too.

An event that does not decode is logged and skipped: a hint is an optimisation, the storage
read it triggers is what decides.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Final

from confluent_kafka import OFFSET_END, TopicPartition

from lakewarden.errortable import SourceKey
from lakewarden.events import EventConsumer
from lakewarden.events.topics import JOB_RESULTS, TIMELINE
from lakewarden.settings import Settings

log = logging.getLogger(__name__)

ENDING: Final = frozenset({"completed", "rolled_back", "aborted"})
_BATCH: Final = 10_000
# After the topics could not be read (or do not exist yet), try again this much later; the
# sink reads storage on its fallback interval meanwhile.
RETRY_S: Final = 10.0


def hinted_key(name: str, record: dict[str, object]) -> SourceKey | None:
    """The key an event says has ended, or None (another event or transition)."""
    envelope = record.get("envelope")
    table_id = envelope.get("table_id") if isinstance(envelope, dict) else None
    instant = record.get("instant")
    if not isinstance(table_id, str) or not isinstance(instant, str):
        return None
    if name == "TimelineTransition" and record.get("transition") in ENDING:
        return SourceKey(table_id, instant)
    if name == "JobCommitResult":
        return SourceKey(table_id, instant)
    return None


class TimelineHints:
    """Ended keys from ``timeline`` and ``job.results``, read from their end. Not thread-safe:
    the sink's loop owns it. No network IO in ``__init__``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topics = (TIMELINE.name(settings), JOB_RESULTS.name(settings))
        self._consumer: EventConsumer | None = None
        self.failed = False  # the topics could not be read: the sink falls back to polling
        self._retry_at = 0.0

    def drain(self) -> set[SourceKey]:
        """The keys named since the last call (empty when the broker is away)."""
        if self._consumer is None and time.monotonic() < self._retry_at:
            return set()
        try:
            consumer = self._client()
            found: set[SourceKey] = set()
            for msg in consumer.consume(_BATCH, 0):
                event = consumer.decode(msg)
                if event is not None:
                    key = hinted_key(event.name, event.record)
                    if key is not None:
                        found.add(key)
            return found
        except Exception as err:  # noqa: BLE001 - hints are optional; storage decides
            if not self.failed:
                log.warning("cannot read timeline hints (polling storage instead): %r", err)
            self.failed = True
            self._retry_at = time.monotonic() + RETRY_S
            self.close()
            return set()

    def close(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            consumer.close()

    def _client(self) -> EventConsumer:
        """Raises: EventConsumerError (the broker did not answer), LookupError (a topic
        does not exist yet)."""
        if self._consumer is None:
            consumer = EventConsumer(
                self.settings,
                group_id=f"error-sink-hints-{uuid.uuid4().hex[:8]}",
                auto_commit=False,
                dead_letters=False,
                logger=log,
            )
            try:
                timeout = self.settings.kafka.request_timeout_s
                found = consumer.partitions_of(self.topics, timeout_s=timeout)
                missing = set(self.topics) - set(found)
                if missing:  # assigned later, once they exist (no hint is lost for good:
                    # the fallback reads storage)
                    raise LookupError(f"topics {sorted(missing)} do not exist yet")
                consumer.assign(
                    [TopicPartition(t, p, OFFSET_END) for t, parts in found.items() for p in parts]
                )
            except BaseException:
                consumer.close()
                raise
            self._consumer = consumer
            self.failed = False
        return self._consumer
