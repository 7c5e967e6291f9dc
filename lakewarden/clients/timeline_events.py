"""Publishing timeline entries as ``TimelineTransition`` events: the replay source.

Storage is the truth for table state, the timeline topic its audit trail. Every appender
announces the entry it appended (``Coordinator.announce``); with Kafka this publisher puts it
on ``lakewarden.timeline``, keyed by table id, and waits for the broker's acknowledgement.
Announcing happens after the table lock is released (a slow broker must not stretch lock
holds), so two writers' events may reach the topic out of seq order; readers order by seq.
It never raises: the entry is in storage already, and a lost announcement is exactly what
``lakewarden replay`` reports.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from lakewarden.errors import LakewardenError
from lakewarden.events.envelope import make_event
from lakewarden.events.producer import EventProducer
from lakewarden.events.topics import TIMELINE, ensure_topics
from lakewarden.settings import Settings
from lakewarden.table.timeline_state import TimelineEntry

log = logging.getLogger(__name__)

# A short wait: the writer waits for it between its protocol steps (also bounds the one-time
# topic check, so an unreachable broker costs a writer seconds, not the request timeout).
_FLUSH_TIMEOUT_S = 5.0


def transition_record(entry: TimelineEntry, *, table_id: str, producer_id: str) -> dict[str, Any]:
    """The ``TimelineTransition`` event of a timeline entry."""
    return make_event(
        "TimelineTransition",
        table_id=table_id,
        producer_id=producer_id,
        seq=entry.seq,
        instant=entry.instant,
        action=str(entry.action),
        transition=str(entry.transition),
        actor=entry.actor,
        lock_token=entry.lock_token,
        wall_time=entry.wall_time_ms,
        payload=json.dumps(entry.payload, sort_keys=True),
    )


class TimelinePublisher:
    """Publishes appended entries to the timeline topic; thread-safe, lazy (no IO until the
    first ``publish``)."""

    def __init__(self, settings: Settings, *, producer: EventProducer | None = None) -> None:
        self.settings = settings
        self._producer = producer
        self._owns_producer = producer is None
        self._guard = threading.Lock()
        self.failed = 0

    def publish(self, table_id: str, entry: TimelineEntry) -> None:
        """Publish ``entry`` and wait for the broker; a failure is logged and counted."""
        record = transition_record(entry, table_id=table_id, producer_id=entry.actor)
        with self._guard:  # one in flight at a time keeps each table's events in log order
            try:
                producer = self._client()
                producer.send("TimelineTransition", record, topic=TIMELINE)
                producer.flush(_FLUSH_TIMEOUT_S)
            except LakewardenError as err:
                self.failed += 1
                log.warning(
                    "timeline entry not announced (replay will report it): %s",
                    err,
                    extra={"table": table_id, "instant": entry.instant, "seq": entry.seq},
                )

    def connect(self) -> None:
        """Check the topic and create the producer now rather than at the first ``publish``.
        Never raises: a failure is logged, and the first ``publish`` tries again."""
        with self._guard:
            try:
                self._client().connect(TIMELINE, _FLUSH_TIMEOUT_S)
            except LakewardenError as err:
                log.warning("timeline announcer not connected yet: %s", err)

    def close(self) -> None:
        """Close an owned producer (flushing what is queued, best effort)."""
        with self._guard:
            producer, self._producer = self._producer, None
        if producer is not None and self._owns_producer:
            try:
                producer.close(_FLUSH_TIMEOUT_S)
            except LakewardenError as err:
                log.warning("timeline announcements lost on close: %s", err)

    def _client(self) -> EventProducer:
        """The producer, created on first use after making sure the timeline topic exists:
        Kafka's auto-creation (when enabled) would give it the default retention, and without
        the topic every announcement waits ``_FLUSH_TIMEOUT_S`` for nothing.

        Raises: RetryableError (the broker did not answer the topic check)."""
        if self._producer is None:
            ensure_topics(self.settings, specs=(TIMELINE,), timeout_s=_FLUSH_TIMEOUT_S)
            self._producer = EventProducer(self.settings, producer_id="timeline-announcer")
        return self._producer
