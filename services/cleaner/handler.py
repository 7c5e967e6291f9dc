"""What the cleaner does with one event, apart from Kafka (so tests can drive it directly; the
loop, ``loop.Loop``, runs each ``handle`` to its end on its own thread).

``EventHandler.handle`` takes one message of ``clean.requests``, ``timeline`` or
``heartbeat.expired``:

1. undecodable, the wrong event, keyed wrongly or an invalid request: dead-letter it;
2. a ``CleanRequest`` registers the table (its URI and owning partition) in ``tables`` and
   waits until the registration is acknowledged by the broker (``persisted``): only then is
   the event's offset stored for the next commit, or a crash in between would forget the
   table for good (it is registered once, and nobody repeats a registration whose event was
   consumed); a changelog write that fails dead-letters the request (``handler_error``: it
   can be replayed from the DLQ, and a writer registers its tables again within the hour);
3. queue the table if its URI is known here; otherwise the event is left to the table's owner
   (whose periodic sweep cleans it: events of one table may reach a non-owner when producers
   partition differently).

``sweep`` queues every table of the partitions this instance owns, behind every triggered
table (``queue.CleanQueue``).

``report`` (every second, with the partitions owned) also follows the assignment: when it
changed, the queued tables this instance no longer owns are dropped (their new owner cleans
them: otherwise the old owner would spend its time on them after a rebalance, racing the new
one, and its own tables would wait), and the tables of the partitions gained are queued as a
sweep (what the old owner had queued for them is not lost, only made a sweep's work). A
moment without partitions (the eager rebalance revokes everything before it assigns) changes
nothing: the next assignment is compared with the last one.

Nothing in ``handle`` suspends when the loop runs it (the registry's ``wait_durable`` polls the
producer, dead letters are produced): see ``_common.loop_service``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Collection, MutableMapping
from typing import Any

from lakewarden.events import Event, InvalidEvent, Undecodable
from lakewarden_services._common.dlq import DeadLetterSink, Message, dead_letter_failures
from lakewarden_services.cleaner import metrics
from lakewarden_services.cleaner.protocol import Trigger, parse_event
from lakewarden_services.cleaner.queue import CleanQueue

log = logging.getLogger(__name__)

Registry = MutableMapping[str, Any]

# Sources that only may have work: queued behind the triggered tables.
_SWEEPS = frozenset({"sweep", "assigned"})


async def _nothing_to_wait_for() -> None:
    return None


class EventHandler:
    """Turns events into queued cleans."""

    def __init__(
        self,
        *,
        registry: Registry,
        queue: CleanQueue,
        dead_letters: DeadLetterSink,
        wake: Callable[[], None],
        persisted: Callable[[], Awaitable[None]] = _nothing_to_wait_for,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``registry``: table id -> ``{"uri", "partition"}`` (the service's
        ``TablesRegistry``, a dict in tests); ``persisted``: returns once the registry's
        changes so far are durable (``TablesRegistry.wait_durable``)."""
        self.registry = registry
        self.persisted = persisted
        self.queue = queue
        self.dead_letters = dead_letters
        self.wake = wake
        self.clock = clock
        self._partitions: frozenset[int] = frozenset()  # the last non-empty assignment seen

    async def handle(self, message: Message, value: Any, *, source: str) -> None:
        """Process one message (see the module docstring); a failure of the service itself
        dead-letters it (``handler_error``) and the service goes on."""
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
            log.debug("no URI known here for table %s: left to its owner", trigger.table_id)
            return False
        metrics.TRIGGERS.labels(source).inc()
        swept = source in _SWEEPS
        self.queue.add(trigger, str(entry["uri"]), self.clock(), swept=swept)
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

    def sweep(self, partitions: Collection[int], *, source: str = "sweep") -> int:
        """Queue every table registered in ``partitions`` (behind the triggered ones): the
        periodic sweep (``sweep``) or partitions just gained (``assigned``); how many."""
        owned = self.owned(partitions)
        if source == "sweep":  # all of them: else only the gained ones
            metrics.TABLES_OWNED.set(len(owned))
        why = "periodic sweep" if source == "sweep" else "partition assigned"
        for table_id in owned:
            self.enqueue(Trigger(table_id, why), source)
        return len(owned)

    def follow_assignment(self, partitions: Collection[int]) -> None:
        """When the partitions owned changed (and are not none): drop the queued tables no
        longer owned, queue the tables of the partitions gained as a sweep."""
        now = frozenset(partitions)
        if not now or now == self._partitions:
            return
        gained, self._partitions = now - self._partitions, now
        mine = set(self.owned(now))
        dropped = self.queue.retain(mine.__contains__)
        queued = self.sweep(gained, source="assigned") if gained else 0
        metrics.QUEUED.set(len(self.queue))
        log.info(
            "assignment followed",
            extra={"partitions": sorted(now), "dropped": dropped, "queued": queued},
        )

    def report(self, partitions: Collection[int]) -> None:
        """Follow the assignment (``follow_assignment``); the gauges: tables owned (those
        registered in ``partitions``), queued, lag."""
        self.follow_assignment(partitions)
        metrics.TABLES_OWNED.set(len(self.owned(partitions)))
        metrics.LAG.set(self.queue.oldest_age(self.clock()))
        metrics.QUEUED.set(len(self.queue))
