"""Registering written tables with the cleaner, so nobody has to ask for it by hand.

The cleaner only cleans tables whose URI it knows, and a ``TimelineTransition`` names a table
by id only. A user with thousands of tables should not have to send a ``CleanRequest`` for
each, so the Kafka coordinator does it: ``Table`` and the Spark driver tell their coordinator
where each table lives (``Coordinator.register_table``, no IO), and the first time this process
announces one of the table's entries (a write's ``requested``, its commit, a plan; never the
cleaner's own clean or rollback entries), a ``CleanRequest`` naming the table's URI is
published, keyed by table id. The cleaner instance owning the table records it (idempotent:
the same table id and URI) and sweeps it from then on.

Why on the first announced entry rather than the first completed commit: a table whose first
write dies must still be known, or its dead instant is never rolled back. Why once per process
rather than once per table, and again every ``reregister_after_s`` (default an hour) while the
process keeps writing: a registration can be lost after it was published (a cleaner instance
killed before its registry's changelog had it, a registry wiped), and a long-lived writer (a
streaming ingestion) would otherwise never repeat it; registering is idempotent, so a repeat
costs one small event. A registration also asks for a clean with the table's own policy, which
is what the cleaner does after a committed write anyway.

Best effort and never raises: the write is in storage already; a registration that failed is
retried at the table's next announced entry.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from lakewarden.errors import LakewardenError
from lakewarden.events.envelope import make_event
from lakewarden.events.producer import EventProducer
from lakewarden.events.topics import CLEAN_REQUESTS, ensure_topics
from lakewarden.settings import Settings
from lakewarden.table.instant import Action
from lakewarden.table.timeline_state import TimelineEntry

log = logging.getLogger(__name__)

# The cleaner's own entries: registering from them would only echo a table it knows already.
_CLEANER_ACTIONS = frozenset({Action.CLEAN, Action.ROLLBACK})
# A writer waits for the broker between protocol steps: keep a slow one from stalling it.
_FLUSH_TIMEOUT_S = 5.0
REGISTERED_BY = "registration"
# Well inside clean.requests' 7-day retention, and rare enough to cost nothing.
REREGISTER_AFTER_S = 3600.0


class CleanerRegistration:
    """Registers each located table with the cleaner at its first announced entry and again
    at the first one after ``reregister_after_s``; thread-safe, lazy (no IO before the first
    registration)."""

    def __init__(
        self,
        settings: Settings,
        *,
        producer: EventProducer | None = None,
        reregister_after_s: float = REREGISTER_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._producer = producer
        self._owns_producer = producer is None
        self._guard = threading.Lock()
        self._uris: dict[str, str] = {}
        self._registered_at: dict[str, float] = {}
        self.reregister_after_s = reregister_after_s
        self.clock = clock
        self.failed = 0

    def locate(self, table_id: str, uri: str) -> None:
        """Remember where ``table_id`` lives (no IO)."""
        with self._guard:
            self._uris[table_id] = uri

    def announced(self, table_id: str, entry: TimelineEntry) -> bool:
        """Register ``table_id`` if this is the first of its entries announced here, or the
        first since its registration is ``reregister_after_s`` old (and its location is known);
        whether a registration was published now."""
        if entry.action in _CLEANER_ACTIONS:
            return False
        with self._guard:  # one registration in flight at a time: no table registered twice
            uri = self._uris.get(table_id)
            last = self._registered_at.get(table_id)
            now = self.clock()
            if uri is None or (last is not None and now - last < self.reregister_after_s):
                return False
            return self._register(table_id, uri, entry.actor)

    def _register(self, table_id: str, uri: str, actor: str) -> bool:
        """Publish the registration (the caller holds ``_guard``); False when it failed."""
        try:
            self._publish(table_id, uri, actor)
        except LakewardenError as err:
            self.failed += 1
            log.warning(
                "table not registered with the cleaner (retried at its next entry): %s",
                err,
                extra={"table": table_id, "uri": uri},
            )
            return False
        self._registered_at[table_id] = self.clock()
        return True

    def before_first_entry(self, table_id: str, actor: str) -> bool:
        """Register ``table_id`` now if its location is known and this process never registered
        it: called before a write appends its ``requested`` entry, so a writer killed right
        after that append (before announcing it) still leaves its table known to the cleaner,
        which then rolls the dead instant back (the campaign's ``requested_left_behind``,
        seed 5021: the table's only writer killed there, and no later write to announce).
        Whether a registration was published now."""
        with self._guard:
            uri = self._uris.get(table_id)
            if uri is None or table_id in self._registered_at:
                return False
            return self._register(table_id, uri, actor)

    def connect(self) -> None:
        """Make sure of the topic and connect the producer now, rather than at the first
        registration: a process's first ``requested`` entry would otherwise wait about half
        a second for an admin request, a new producer and its first delivery (a streaming
        task's or commit's first batch with rows). Never raises: the first registration
        tries again."""
        with self._guard:
            try:
                self._client().connect(CLEAN_REQUESTS, _FLUSH_TIMEOUT_S)
            except LakewardenError as err:
                log.warning("cleaner registration not connected yet: %s", err)

    def close(self) -> None:
        """Close an owned producer (best effort)."""
        with self._guard:
            producer, self._producer = self._producer, None
        if producer is not None and self._owns_producer:
            try:
                producer.close(_FLUSH_TIMEOUT_S)
            except LakewardenError as err:
                log.warning("cleaner registrations lost on close: %s", err)

    def _publish(self, table_id: str, uri: str, actor: str) -> None:
        """Raises: RetryableError, EventDeliveryError."""
        producer = self._client()
        who = f"{REGISTERED_BY}:{actor}"
        record = make_event(
            "CleanRequest",
            table_id=table_id,
            producer_id=who,
            table_uri=uri,
            policy=None,
            delete_orphans=False,
            requested_by=who,
        )
        producer.send("CleanRequest", record, topic=CLEAN_REQUESTS)
        producer.flush(_FLUSH_TIMEOUT_S)

    def _client(self) -> EventProducer:
        """The producer, made at first use (the caller holds ``_guard``).

        Raises: RetryableError (the broker did not answer the topic check)."""
        if self._producer is None:
            # Like the timeline topic: made here with its retention rather than by auto-create.
            ensure_topics(self.settings, specs=(CLEAN_REQUESTS,), timeout_s=_FLUSH_TIMEOUT_S)
            self._producer = EventProducer(self.settings, producer_id="cleaner-registration")
        return self._producer


__all__ = ["CleanerRegistration", "REGISTERED_BY"]
