"""The cleaner's Kafka loop and its clean thread.

``Loop`` is a plain confluent-kafka loop, like cancel-manager's: one consumer in the group
``<prefix>cleaner`` (static membership with ``LAKEWARDEN_INSTANCE_ID``; ``range`` assignment
gives each instance an even share of ``clean.requests``' partitions, hence of the tables), one
producer (registrations and dead letters), one thread. Each turn:

1. wait for an event (returns as soon as one arrives), take what else is already there;
2. for each: decode it, hand it to ``EventHandler`` (register, queue, dead-letter), store its
   offset;
3. every ``commit_interval_s``: flush the producer, then commit the stored offsets (a
   registration and a dead letter are durable before the offset past their event is
   committed: at-least-once; the handler is idempotent);
4. every ``sweep_interval_s``: queue every table this instance owns; every second: the
   tables-owned, queued and lag gauges.

On assignment the ``tables`` registry of the new ``clean.requests`` partitions is read back
from its changelog to its end before any event is handled (``recover_changelog``: it either
ends or fails with ``EventConsumerError`` within its deadline, and a loop that fails that way
is built again, ``RebuildingLoop``); on revocation the offsets are committed and the registry
dropped (the next assignment reads back what it gives).

Why not faust, which the service used before: its table recovery could wait forever for a
changelog partition after a broker restart (``/health`` stuck at ``rebalancing``, nothing
cleaned), and a registration could be lost across a rebalance. Here recovery is one bounded
read and a registration is acknowledged before its offset is stored.

``CleanLoop`` runs on its own thread: it takes tables off the queue and cleans one at a time
(``CleanWorker``), so a long clean never holds up the consumer (its group session, the
registrations of other tables). A table is cleaned only by the instance that owns it, except
around a rebalance (a queued table of a revoked partition is still cleaned): the table lock
and the clean instant make that safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from confluent_kafka import KafkaError, Message, TopicPartition

from lakewarden.events import Event, EventCodec, default_codec
from lakewarden.events.topics import CLEAN_REQUESTS, DLQ, HEARTBEAT_EXPIRED, TIMELINE
from lakewarden.settings import Settings
from lakewarden_services._common.changelog import recover_changelog
from lakewarden_services._common.dlq import DeadLetters
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
from lakewarden_services.cleaner import metrics
from lakewarden_services.cleaner.app import SERVICE, TABLES_CHANGELOG
from lakewarden_services.cleaner.handler import EventHandler
from lakewarden_services.cleaner.queue import CleanQueue, Work

__all__ = ["CleanLoop", "Loop"]

log = logging.getLogger(__name__)

_DRAIN: Final = 100  # events taken at once when several are already there
_POLL_S: Final = 0.1
_REPORT_S: Final = 1.0


def _a_registration(value: Any) -> bool:
    """What the cleaner keeps per table: ``{"uri": str, "partition": int}``."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("uri"), str)
        and isinstance(value.get("partition"), int)
    )


class Loop:
    """Runs the cleaner's consumer until ``stop`` is set (see the module doc). ``on_ready``
    is called once, after the first assignment (and its recovery) completed; ``wake`` is
    called when a table was queued."""

    def __init__(
        self,
        settings: Settings,
        queue: CleanQueue,
        *,
        group_id: str,
        group_instance_id: str | None,
        commit_interval_s: float,
        sweep_interval_s: float,
        wake: Callable[[], None] = lambda: None,
        on_ready: Callable[[], None] = lambda: None,
        codec: EventCodec | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.queue = queue
        self.group_id = group_id
        self.commit_interval_s = commit_interval_s
        self.sweep_interval_s = sweep_interval_s
        self.on_ready = on_ready
        self.codec = codec or default_codec()
        self.clock = clock
        self.membership = Membership()
        self.rebalances = 0
        self.owned: set[int] = set()  # the clean.requests partitions assigned here
        self.requests_topic = CLEAN_REQUESTS.name(settings)
        self.changelog_topic = TABLES_CHANGELOG.name(settings)
        self._sources = {
            self.requests_topic: "request",
            TIMELINE.name(settings): "transition",
            HEARTBEAT_EXPIRED.name(settings): "expired",
        }
        self.consumer = loop_consumer(
            settings,
            group_id=group_id,
            codec=self.codec,
            group_instance_id=group_instance_id,
            logger=log,
            partition_assignment_strategy="range",  # an even share of clean.requests each
        )
        # A registration is waited for before the next event: no linger.
        self.producer = loop_producer(settings, linger_ms=0, logger=log)
        self.outbox = Outbox(self.producer, timeout_s=settings.kafka.request_timeout_s, logger=log)
        self.registry = TablesRegistry(
            produce=self._produce_registration, poll=self.producer.poll, accept=_a_registration
        )
        self.handler = EventHandler(
            registry=self.registry,
            queue=queue,
            dead_letters=DeadLetters(
                ProducedTopic(self.produce, DLQ.name(settings)),
                service=SERVICE,
                consumer_group=group_id,
            ),
            wake=wake,
            persisted=self._persisted,
            clock=clock,
        )

    def run(self, stop: threading.Event) -> None:
        """The loop (see the module doc) until ``stop`` is set; then commit and close.

        Raises:
            EventConsumerError: the consumer failed fatally or the registry could not be read.
        """
        self.consumer.subscribe(
            list(self._sources),
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
                    self.report()
                    last_report = now
        finally:
            self._close()

    def report(self) -> None:
        """The gauges: tables owned, queued, lag."""
        metrics.TABLES_OWNED.set(len(self.handler.owned(self.owned)))
        metrics.LAG.set(self.queue.oldest_age(self.clock()))
        metrics.QUEUED.set(len(self.queue))

    # -- one event -------------------------------------------------------------------------

    def _process(self, msg: Message) -> None:
        message, value = consumed(msg, self.codec)
        self.registry.partition = message.partition  # a registration goes where it came
        source = self._sources.get(message.topic, "unknown")
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
        mine = sorted(tp.partition for tp in partitions if tp.topic == self.requests_topic)
        records = recover_changelog(
            self.settings, group_id=self.group_id, topic=self.changelog_topic, partitions=mine
        )
        skipped = self.registry.load(records)
        if skipped:
            log.error("unreadable registry records skipped", extra={"keys": skipped[:5]})
        self.owned = set(mine)
        log.info(
            "partitions assigned",
            extra={"partitions": mine, "tables": len(self.registry), "service": SERVICE},
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


class CleanLoop:
    """Takes tables off ``queue`` and cleans each with ``clean``, one at a time, on the thread
    that calls ``run``; ``wake`` tells it a table was queued."""

    def __init__(self, queue: CleanQueue, clean: Callable[[Work], object]) -> None:
        self.queue = queue
        self.clean = clean
        self._wakeup = threading.Event()

    def wake(self) -> None:
        self._wakeup.set()

    def run(self, stop: threading.Event) -> None:
        """Until ``stop`` is set (a clean in progress is finished first)."""
        while not stop.is_set():
            self._wakeup.clear()
            work = self.queue.take()
            if work is None:
                self._wakeup.wait(_POLL_S * 5)
                continue
            try:
                self.clean(work)
            except Exception:
                log.exception("cleaning table %s failed; it is cleaned again later", work.table_id)
            finally:
                self.queue.done(work.table_id)
