"""What the publisher does with one event, apart from Kafka (so tests drive it directly; the
loop, ``_common.table_loop.TableLoop``, runs each ``handle`` to its end on its own thread).

``EventHandler.handle`` takes one message of ``clean.requests`` or ``timeline``:

1. undecodable, the wrong event, keyed wrongly or an invalid registration: dead-letter it;
2. a registration records the table's URI and owning partition in ``tables`` and waits until
   the broker acknowledged it (``persisted``) before the event's offset may be committed;
3. queue the table if its URI is known here; otherwise the event is left to the table's
   owner (whose sweep publishes it).

``PublishQueue`` holds each table once, oldest first; a table being published is not handed
out again until ``done``. The loop adds and the sync threads take, so every method of the
queue holds its lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable, Collection, MutableMapping
from dataclasses import dataclass
from typing import Any

from lakewarden.events import Event, InvalidEvent, Undecodable
from lakewarden_services._common.dlq import DeadLetterSink, Message, dead_letter_failures
from lakewarden_services.publisher import metrics
from lakewarden_services.publisher.protocol import Trigger, parse_event

log = logging.getLogger(__name__)

Registry = MutableMapping[str, Any]


@dataclass
class Work:
    table_id: str
    table_uri: str
    queued_at: float


class PublishQueue:
    """Tables waiting to be published, in the order they were first queued."""

    def __init__(self) -> None:
        self._waiting: dict[str, Work] = {}
        self._running: set[str] = set()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, table_id: str, table_uri: str, now: float) -> None:
        with self._lock:
            work = self._waiting.setdefault(table_id, Work(table_id, table_uri, now))
            work.table_uri = table_uri

    def take(self) -> Work | None:
        with self._lock:
            for table_id, work in self._waiting.items():
                if table_id not in self._running:
                    del self._waiting[table_id]
                    self._running.add(table_id)
                    return work
        return None

    def done(self, table_id: str) -> None:
        with self._lock:
            self._running.discard(table_id)

    def oldest_age(self, now: float) -> float:
        with self._lock:
            return max((now - w.queued_at for w in self._waiting.values()), default=0.0)


async def _nothing_to_wait_for() -> None:
    return None


class EventHandler:
    """Turns events into queued syncs."""

    def __init__(
        self,
        *,
        registry: Registry,
        queue: PublishQueue,
        dead_letters: DeadLetterSink,
        wake: Callable[[], None],
        persisted: Callable[[], Awaitable[None]] = _nothing_to_wait_for,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.queue = queue
        self.dead_letters = dead_letters
        self.wake = wake
        self.persisted = persisted
        self.clock = clock

    async def handle(self, message: Message, value: Any, *, source: str) -> None:
        """Process one message; a failure of the service itself dead-letters it."""
        await dead_letter_failures(
            self.dead_letters, message, self._handle(message, value, source), what=source
        )

    async def _handle(self, message: Message, value: Any, source: str) -> None:
        if isinstance(value, Undecodable):  # 1.
            await self.dead_letters.undecodable(message, value)
            return
        if not isinstance(value, Event):
            await self.dead_letters.reject(
                message, reason="unexpected_event", detail=f"not an event: {type(value).__name__}"
            )
            return
        try:
            trigger = parse_event(value.name, value.record, key=message.key)
        except InvalidEvent as err:
            await self.dead_letters.reject(message, reason=err.reason, detail=err.detail)
            return
        if trigger is None:
            return
        if trigger.table_uri is not None:  # 2.
            self.registry[trigger.table_id] = {
                "uri": trigger.table_uri,
                "partition": message.partition,
            }
            await self.persisted()
        self.enqueue(trigger, source)  # 3.

    def enqueue(self, trigger: Trigger, source: str) -> bool:
        """Queue ``trigger``'s table if its URI is known here; whether it was."""
        entry = self.registry.get(trigger.table_id)
        if not entry:
            metrics.TRIGGERS.labels("unknown").inc()
            return False
        metrics.TRIGGERS.labels(source).inc()
        self.queue.add(trigger.table_id, str(entry["uri"]), self.clock())
        metrics.QUEUED.set(len(self.queue))
        self.wake()
        return True

    def owned(self, partitions: Collection[int]) -> list[str]:
        """The tables registered in ``partitions`` (those this instance owns)."""
        return sorted(
            table_id
            for table_id, entry in list(self.registry.items())
            if entry and entry.get("partition") in partitions
        )

    def sweep(self, partitions: Collection[int]) -> int:
        """Queue every owned table; returns how many."""
        owned = self.owned(partitions)
        metrics.TABLES_OWNED.set(len(owned))
        for table_id in owned:
            self.enqueue(Trigger(table_id, "periodic sweep"), "sweep")
        return len(owned)

    def report(self, partitions: Collection[int]) -> None:
        """The gauges: tables owned (those registered in ``partitions``), queued, lag."""
        metrics.TABLES_OWNED.set(len(self.owned(partitions)))
        metrics.LAG.set(self.queue.oldest_age(self.clock()))
        metrics.QUEUED.set(len(self.queue))
