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
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any, Final, Protocol

from confluent_kafka import KafkaError, Message, TopicPartition

from lakewarden.events import Event, EventCodec, default_codec
from lakewarden.events.topics import DLQ, TopicSpec
from lakewarden.settings import Settings
from lakewarden_services._common.changelog import recover_changelog
from lakewarden_services._common.dlq import DeadLetters, DeadLetterSink
from lakewarden_services._common.dlq import Message as HandlerMessage
from lakewarden_services._common.loop_service import (
    Outbox,
    ProducedTopic,
    consumed,
    loop_consumer,
    loop_producer,
    run_to_end,
)
from lakewarden_services._common.membership import Membership
from lakewarden_services._common.registry import TablesRegistry

__all__ = ["TableHandler", "TableLoop", "WorkPool", "is_registration"]

log = logging.getLogger(__name__)

_DRAIN: Final = 100  # events taken at once when several are already there
_POLL_S: Final = 0.1
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


# (registry, dead letters, persisted) -> the service's handler.
MakeHandler = Callable[
    [TablesRegistry, DeadLetterSink, Callable[[], Awaitable[None]]], TableHandler
]


class TableLoop:
    """Runs a table-owning service's consumer until ``stop`` is set (see the module doc).

    ``sources``: the topics it follows and the source each event is handled as, the
    registrations topic first. ``on_ready`` is called once, after the first assignment (and
    its recovery) completed."""

    def __init__(
        self,
        settings: Settings,
        *,
        service: str,
        sources: Sequence[tuple[TopicSpec, str]],
        changelog: TopicSpec,
        make_handler: MakeHandler,
        group_id: str,
        group_instance_id: str | None,
        commit_interval_s: float,
        sweep_interval_s: float,
        on_ready: Callable[[], None] = lambda: None,
        codec: EventCodec | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.service = service
        self.group_id = group_id
        self.commit_interval_s = commit_interval_s
        self.sweep_interval_s = sweep_interval_s
        self.on_ready = on_ready
        self.codec = codec or default_codec()
        self.clock = clock
        self.membership = Membership()
        self.rebalances = 0
        self.owned: set[int] = set()  # the registrations partitions assigned here
        self.sources = {spec.name(settings): source for spec, source in sources}
        self.registrations_topic = sources[0][0].name(settings)
        self.changelog_topic = changelog.name(settings)
        self.consumer = loop_consumer(
            settings,
            group_id=group_id,
            codec=self.codec,
            group_instance_id=group_instance_id,
            logger=log,
            partition_assignment_strategy="range",  # an even share of registrations each
        )
        # A registration is waited for before the next event: no linger.
        self.producer = loop_producer(settings, linger_ms=0, logger=log)
        self.outbox = Outbox(self.producer, timeout_s=settings.kafka.request_timeout_s, logger=log)
        self.registry = TablesRegistry(
            produce=self._produce_registration, poll=self.producer.poll, accept=is_registration
        )
        dead_letters = DeadLetters(
            ProducedTopic(self.produce, DLQ.name(settings)),
            service=service,
            consumer_group=group_id,
        )
        self.handler = make_handler(self.registry, dead_letters, self._persisted)

    def run(self, stop: threading.Event) -> None:
        """The loop (see the module doc) until ``stop`` is set; then commit and close.

        Raises:
            EventConsumerError: the consumer failed fatally or the registry could not be read.
        """
        self.consumer.subscribe(
            list(self.sources),
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        last_commit = last_sweep = last_report = self.clock()
        try:
            while not stop.is_set():
                msg = self.consumer.poll_message(_POLL_S)  # 1.
                if msg is not None:
                    for each in [msg, *self.consumer.consume(_DRAIN, 0)]:
                        self._process(each)  # 2.
                self.producer.poll(0)  # delivery reports
                now = self.clock()
                if now - last_commit >= self.commit_interval_s:
                    self.outbox.commit(self.consumer)  # 3.
                    last_commit = now
                if now - last_sweep >= self.sweep_interval_s:
                    self.handler.sweep(self.owned)  # 4.
                    last_sweep = now
                if now - last_report >= _REPORT_S:
                    self.handler.report(self.owned)
                    last_report = now
        finally:
            self._close()

    # -- one event -------------------------------------------------------------------------

    def _process(self, msg: Message) -> None:
        message, value = consumed(msg, self.codec)
        self.registry.partition = message.partition  # a registration goes where it came
        source = self.sources.get(message.topic, "unknown")
        run_to_end(self.handler.handle(message, value, source=source))
        # A partition revoked meanwhile is skipped: its next owner handles the event again.
        self.consumer.store_offsets(
            [TopicPartition(message.topic, message.partition, message.offset + 1)]
        )

    def produce(self, topic: str, key: bytes | None, event: Event) -> None:
        """Hand ``event`` to librdkafka (a dead letter)."""
        self.outbox.produce(topic, self.codec.encode(event.name, event.record), key=key)

    def _produce_registration(
        self,
        key: bytes,
        value: bytes,
        partition: int,
        on_delivery: Callable[[KafkaError | None, Message], None],
    ) -> None:
        self.outbox.produce(
            self.changelog_topic, value, key=key, partition=partition, on_delivery=on_delivery
        )

    async def _persisted(self) -> None:
        self.registry.wait_durable(self.settings.kafka.request_timeout_s)

    # -- rebalances ------------------------------------------------------------------------

    def _on_assign(self, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        mine = sorted(tp.partition for tp in partitions if tp.topic == self.registrations_topic)
        records = recover_changelog(
            self.settings, group_id=self.group_id, topic=self.changelog_topic, partitions=mine
        )
        skipped = self.registry.load(records)
        if skipped:
            log.error("unreadable registry records skipped", extra={"keys": skipped[:5]})
        self.owned = set(mine)
        log.info(
            "partitions assigned",
            extra={"partitions": mine, "tables": len(self.registry), "service": self.service},
        )
        first = not self.membership.ready
        self.membership.assigned()
        if first:
            self.on_ready()

    def _on_revoke(self, partitions: list[TopicPartition]) -> None:
        self.membership.revoked()
        self.outbox.commit(self.consumer)
        self.owned = set()
        self.registry.forget_all()

    def _on_lost(self, partitions: list[TopicPartition]) -> None:
        self.membership.lost()
        self.owned = set()
        self.registry.forget_all()

    def _close(self) -> None:
        try:
            self.outbox.commit(self.consumer)
            self.consumer.close()
        finally:
            self.producer.flush(self.settings.kafka.request_timeout_s)


class WorkQueue(Protocol):
    """A queue of tables that hands each to one taker at a time (``take`` ... ``done``)."""

    def take(self) -> Any: ...

    def done(self, table_id: str) -> None: ...


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
