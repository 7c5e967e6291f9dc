"""The runtime of a service that owns tables (the cleaner, the publisher): a plain
confluent-kafka loop that registers tables and queues work, and a pool of threads that does
the work.

A table is registered by an event on the ``registrations`` topic (``clean.requests``: a
``CleanRequest`` names its URI) and kept in the service's ``tables`` registry (table id ->
``{"uri", "partition"}``, ``registry.TablesRegistry``), changelogged to the partition of its
registration, so the instance that owns partition P of ``registrations`` owns the tables
registered there. Other topics (``timeline``, ``heartbeat.expired``) only say that an owned
table has work; an instance that does not own the table leaves it to its owner's sweep.

``TableLoop`` (one consumer in the group ``<prefix><service>``, static membership with
``LAKEWARDEN_INSTANCE_ID``, ``range`` assignment: each instance an even share of
``registrations``' partitions; one producer; one thread), each turn:

1. wait for an event (returns as soon as one arrives), take what else is already there;
2. for each: decode it, hand it to the service's handler (register, queue, dead-letter; the
   handler returns once a registration is acknowledged by the broker), store its offset;
3. every ``commit_interval_s``: flush the producer, then commit the stored offsets
   (at-least-once: nothing is committed past an undelivered registration or dead letter; the
   handlers are idempotent);
4. every ``sweep_interval_s``: queue every table this instance owns; every second: the
   handler's gauges.

On assignment the registry of the new ``registrations`` partitions is read back from the
changelog to its end before any event is handled (``changelog.recover_changelog``: it ends,
or fails with ``EventConsumerError`` within its deadline, and ``RebuildingLoop`` then builds
the loop again); on revocation the offsets are committed and the registry dropped (the
eager ``range`` rebalance revokes every partition; the next assignment reads back what it
gives).

Why not faust, which these services used before: its table recovery could wait forever for a
changelog partition after a broker restart (``/health`` stuck at ``rebalancing``, nothing
done), and a registration could be lost across a rebalance. Here recovery is one bounded read
and a registration is durable before its offset is stored.

``WorkPool`` runs the work on ``threads`` threads beside the loop, so slow work never holds up
the consumer (its group session, the registrations of other tables); the queue hands a table
to one thread at a time.

``serve_tables`` runs such a service: what is its own (``TableService``: its name, topics,
changelog and handler class, declared in its ``loop.py``; its queue, work and settings, from
its ``__main__``) is passed in.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Final, NoReturn, Protocol

from confluent_kafka import Message, TopicPartition

from lakewarden.events import EventCodec
from lakewarden.events.topics import TopicSpec
from lakewarden.settings import Settings
from lakewarden_services._common.dlq import DeadLetterSink
from lakewarden_services._common.dlq import Message as HandlerMessage
from lakewarden_services._common.loop_service import (
    consumed,
    run_to_end,
    serve_loop,
)
from lakewarden_services._common.registry import RegistryLoop, TablesRegistry
from lakewarden_services._common.settings import Group, ServiceSettings

__all__ = [
    "TableHandler",
    "TableLoop",
    "TableService",
    "WorkPool",
    "is_registration",
    "serve_tables",
]

log = logging.getLogger(__name__)

_REPORT_S: Final = 1.0
_IDLE_WAIT_S: Final = 0.5


def is_registration(value: Any) -> bool:
    """What a table-owning service keeps per table: ``{"uri": str, "partition": int}``."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("uri"), str)
        and isinstance(value.get("partition"), int)
    )


class TableHandler(Protocol):
    """What ``TableLoop`` needs of a service's handler."""

    async def handle(self, message: HandlerMessage, value: Any, *, source: str) -> None: ...

    def sweep(self, partitions: Collection[int]) -> int: ...

    def report(self, partitions: Collection[int]) -> None: ...


class WorkQueue(Protocol):
    """A queue of tables that hands each to one taker at a time (``take`` ... ``done``)."""

    def take(self) -> Any: ...

    def done(self, table_id: str) -> None: ...


class HandlerClass(Protocol):
    """A service's handler class: it registers tables in ``registry``, queues work on
    ``queue`` (and calls ``wake``), dead-letters what it cannot use, and awaits ``persisted``
    before it acts on a registration."""

    def __call__(
        self,
        *,
        registry: TablesRegistry,
        queue: Any,
        dead_letters: DeadLetterSink,
        wake: Callable[[], None],
        persisted: Callable[[], Awaitable[None]],
    ) -> TableHandler: ...


@dataclass(frozen=True)
class TableService:
    """What a table-owning service declares (its ``loop.py``): ``sources``, the topics it
    follows and the source each event is handled as, the registrations topic first;
    ``topics``, every topic it needs (created at start); ``work``, what its work threads do
    (their name)."""

    name: str
    sources: Sequence[tuple[TopicSpec, str]]
    changelog: TopicSpec
    topics: Sequence[TopicSpec]
    handler: HandlerClass
    work: str


class TableLoop(RegistryLoop):
    """Runs a table-owning service's consumer until ``stop`` is set (see the module doc),
    its handler ``service.handler`` queueing work on ``queue`` (``wake`` when it did).
    ``on_ready`` is called once, after the first assignment (and its recovery) completed."""

    def __init__(
        self,
        settings: Settings,
        service: TableService,
        *,
        queue: WorkQueue,
        wake: Callable[[], None],
        group: Group,
        commit_interval_s: float,
        sweep_interval_s: float,
        on_ready: Callable[[], None] = lambda: None,
        codec: EventCodec | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # ``range`` assignment: an even share of the registrations partitions each.
        registrations, changelog = service.sources[0][0], service.changelog
        super().__init__(
            settings,
            group,
            service=service.name,
            topics=(registrations.name(settings), changelog.name(settings)),
            accept=is_registration,
            on_ready=on_ready,
            codec=codec,
        )
        self.commit_interval_s = commit_interval_s
        self.sweep_interval_s = sweep_interval_s
        self.clock = clock
        self.sources = {spec.name(settings): source for spec, source in service.sources}
        self.handler = service.handler(
            registry=self.registry,
            queue=queue,
            dead_letters=self.dead_letters,
            wake=wake,
            persisted=self.persisted,
        )

    def run(self, stop: threading.Event) -> None:
        """The loop (see the module doc) until ``stop`` is set; then commit and close.

        Raises:
            EventConsumerError: the consumer failed fatally or the registry could not be read.
        """
        self.subscribe(list(self.sources))
        last_commit = last_sweep = last_report = self.clock()
        try:
            while not stop.is_set():
                for msg in self.polled():  # 1.
                    self._process(msg)  # 2.
                self.producer.poll(0)  # delivery reports
                now = self.clock()
                if now - last_commit >= self.commit_interval_s:
                    self.commit()  # 3.
                    last_commit = now
                if now - last_sweep >= self.sweep_interval_s:
                    self.handler.sweep(self.owned)  # 4.
                    last_sweep = now
                if now - last_report >= _REPORT_S:
                    self.handler.report(self.owned)
                    last_report = now
        finally:
            self.close()

    def _process(self, msg: Message) -> None:
        message, value = consumed(msg, self.codec)
        self.registry.partition = message.partition  # a registration goes where it came
        source = self.sources.get(message.topic, "unknown")
        run_to_end(self.handler.handle(message, value, source=source))
        # A partition revoked meanwhile is skipped: its next owner handles the event again.
        self.consumer.store_offsets(
            [TopicPartition(message.topic, message.partition, message.offset + 1)]
        )


class WorkPool:
    """Runs ``work`` on what ``queue`` hands out, on ``threads`` threads (``start``); ``wake``
    tells them a table was queued. A failure is logged and the table released (it is done
    again on its next trigger or sweep)."""

    def __init__(
        self,
        queue: WorkQueue,
        work: Callable[[Any], object],
        *,
        threads: int,
        name: str,
    ) -> None:
        self.queue = queue
        self.work = work
        self.threads = threads
        self.name = name
        self._changed = threading.Condition()
        self._generation = 0  # bumped by every wake: a wake is never lost between take and wait

    def wake(self) -> None:
        with self._changed:
            self._generation += 1
            self._changed.notify_all()

    def start(self, stop: threading.Event) -> list[threading.Thread]:
        """Start the threads (daemons: work cut short when the process exits is redone by
        the next trigger, as after a kill); they end once ``stop`` is set."""
        started = []
        for i in range(self.threads):
            thread = threading.Thread(
                target=self.run, args=(stop,), name=f"{self.name}-{i}", daemon=True
            )
            thread.start()
            started.append(thread)
        return started

    def run(self, stop: threading.Event) -> None:
        """One thread's loop, until ``stop`` is set (its work in progress is finished first)."""
        while not stop.is_set():
            with self._changed:
                seen = self._generation
            item = self.queue.take()
            if item is None:
                with self._changed:
                    if self._generation == seen:
                        self._changed.wait(_IDLE_WAIT_S)
                continue
            try:
                self.work(item)
            except Exception:
                log.exception(
                    "%s of table %s failed; it is done again later", self.name, item.table_id
                )
            finally:
                self.queue.done(item.table_id)
                self.wake()  # its table may have been queued again meanwhile


def serve_tables(
    service: TableService,
    settings: Settings,
    service_settings: ServiceSettings,
    *,
    queue: WorkQueue,
    work: Callable[[Any], object],
    threads: int,
    sweep_interval_s: float,
    warm_up: Callable[[], None] | None = None,
) -> NoReturn:
    """Run ``service`` until SIGTERM/SIGINT (``loop_service.serve_loop``): ``work`` on
    ``threads`` threads takes the tables its handler queues on ``queue``; every owned table is
    queued at least every ``sweep_interval_s``. The pool outlives a loop built again after a
    fatal consumer error. ``warm_up`` (connecting the work's own clients) runs once on a thread
    of its own when the first loop is built: the topics exist by then."""
    pool = WorkPool(queue, work, threads=threads, name=service.work)
    pool.start(threading.Event())
    warm = [warm_up] if warm_up is not None else []

    def build() -> TableLoop:
        while warm:
            threading.Thread(target=warm.pop(), name=f"{service.work}-warm-up", daemon=True).start()
        return TableLoop(
            settings,
            service,
            queue=queue,
            wake=pool.wake,
            group=service_settings.group(service.name, settings),
            commit_interval_s=service_settings.commit_interval_s,
            sweep_interval_s=sweep_interval_s,
        )

    def details(loop: TableLoop) -> dict[str, Any]:
        return {"tables": len(loop.registry)}

    serve_loop(
        service.name,
        service_settings,
        settings=settings,
        topics=service.topics,
        build=build,
        details=details,
    )
