"""cancel-manager's Kafka loop: one consumer, one producer, one thread.

Why a plain confluent-kafka loop rather than a faust agent: a ``CancelClient`` waits for every
answer, so the service's latency is the product, and RFC-79's transaction puts a table lock
round trip (to timeline-lock) inside every request. Through faust a request crossed aiokafka's
fetcher, the agent's queue, a worker thread and aiokafka's sender, and the lock's round trip
competed with faust's event loop: each of those hops added about as much as a whole Kafka
round trip, so a request cost several echo round trips where its goal is a small multiple of
one (``python -m benchmarks cancel``). Here a request is read by librdkafka, applied on the
same thread (``CancelWorker``, which takes the table lock through the lock client) and its
transitions and result are handed to librdkafka at once.

It keeps what faust gave: a consumer group whose members split the partitions (static
membership with ``LAKEWARDEN_INSTANCE_ID``; ``range`` assignment keeps partition P of
``cancel.requests`` and of ``heartbeat.expired`` together), the ``tables`` registry in a
compacted changelog read back on assignment before any event of those partitions is handled,
dead letters for malformed events, and at-least-once processing (offsets are committed only
after the producer was flushed: every transition, result, registration and dead letter of
what they cover is durable; the handlers are idempotent).

The handlers (``handler``) are the same coroutines the faust agents ran (so their unit tests
drive them directly), and nothing in them suspends: sends are ``producer.produce`` calls, the
blocking steps run inline (this thread is the service's only worker), and the one wait, a
registration made durable, polls the producer. So the loop steps each coroutine to its end
itself (``loop_service.run_to_end``), with no event loop: an asyncio loop's
``run_until_complete`` cost two turns of its scheduler (and an ``epoll`` call each) per event.

The loop, each turn:
1. wait for an event (returns as soon as one arrives), take what else is already there;
2. for each: a request's table lock is sent ahead by its key (``RequestHandler.lock_ahead``:
   its round trip to timeline-lock overlaps the rest); decode it and hand it to its handler
   (requests, expiries); store its offset;
3. every ``commit_interval_s``: flush the producer, then commit the stored offsets.

On assignment the registry of the new partitions is read to its end first; on revocation
the offsets are committed and the registry dropped (the next assignment reads it back).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from confluent_kafka import KafkaError, Message, TopicPartition

from lakewarden.events import Event, EventCodec, default_codec
from lakewarden.events.topics import (
    CANCEL_REQUESTS,
    CANCEL_RESULTS,
    DLQ,
    HEARTBEAT_EXPIRED,
    TIMELINE,
)
from lakewarden.settings import Settings
from lakewarden.table import Coordinator
from lakewarden_services._common.changelog import recover_changelog
from lakewarden_services._common.dlq import DeadLetters
from lakewarden_services._common.loop_service import (
    HandlerSuspendedError,
    Outbox,
    ProducedTopic,
    consumed,
    inline,
    loop_consumer,
    loop_producer,
    run_to_end,
)
from lakewarden_services._common.membership import Membership
from lakewarden_services._common.registry import TablesRegistry
from lakewarden_services.cancel_manager.app import SERVICE, TABLES_CHANGELOG
from lakewarden_services.cancel_manager.handler import ExpiryHandler, RequestHandler
from lakewarden_services.cancel_manager.worker import CancelWorker

__all__ = ["HandlerSuspendedError", "Loop"]

log = logging.getLogger(__name__)

_DRAIN: Final = 100  # events taken at once when several are already there
_POLL_S: Final = 0.1


class Loop:
    """Runs cancel-manager until ``stop`` is set (see the module doc). ``on_ready`` is called
    once, after the first assignment (and its recovery) completed."""

    def __init__(
        self,
        settings: Settings,
        coordinator: Callable[[], Coordinator],
        *,
        group_id: str,
        group_instance_id: str | None,
        commit_interval_s: float,
        on_ready: Callable[[], None] = lambda: None,
        codec: EventCodec | None = None,
    ) -> None:
        self.settings = settings
        self.group_id = group_id
        self.commit_interval_s = commit_interval_s
        self.on_ready = on_ready
        self.codec = codec or default_codec()
        self.membership = Membership()
        self.rebalances = 0
        self.requests_topic = CANCEL_REQUESTS.name(settings)
        self.expired_topic = HEARTBEAT_EXPIRED.name(settings)
        self.results_topic = CANCEL_RESULTS.name(settings)
        self.timeline_topic = TIMELINE.name(settings)
        self.changelog_topic = TABLES_CHANGELOG.name(settings)
        self.consumer = loop_consumer(
            settings,
            group_id=group_id,
            codec=self.codec,
            group_instance_id=group_instance_id,
            logger=log,
            partition_assignment_strategy="range",  # P of requests and expiries together
        )
        # A client waits for each result: no linger.
        self.producer = loop_producer(settings, linger_ms=0, logger=log)
        self.outbox = Outbox(self.producer, timeout_s=settings.kafka.request_timeout_s, logger=log)
        self.registry = TablesRegistry(produce=self._produce_registration, poll=self.producer.poll)
        dead_letters = DeadLetters(
            ProducedTopic(self.produce, DLQ.name(settings)),
            service=SERVICE,
            consumer_group=group_id,
        )
        worker = CancelWorker(settings, coordinator)
        self.requests = RequestHandler(
            worker=worker,
            run_blocking=inline,
            send_result=self._sender(self.results_topic),
            send_transition=self._sender(self.timeline_topic),
            dead_letters=dead_letters,
            producer_id=SERVICE,
            registry=self.registry,
            persisted=self._persisted,
        )
        self.expiries = ExpiryHandler(
            worker=worker,
            run_blocking=inline,
            send_transition=self._sender(self.timeline_topic),
            dead_letters=dead_letters,
            producer_id=SERVICE,
            registry=self.registry,
        )

    def run(self, stop: threading.Event) -> None:
        """The loop (see the module doc) until ``stop`` is set; then commit and close.

        Raises:
            EventConsumerError: the consumer failed fatally or the registry could not be read.
        """
        self.consumer.subscribe(
            [self.requests_topic, self.expired_topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        last_commit = time.monotonic()
        try:
            while not stop.is_set():
                msg = self.consumer.poll_message(_POLL_S)  # 1.
                if msg is not None:
                    for each in [msg, *self.consumer.consume(_DRAIN, 0)]:
                        self._process(each)  # 2.
                self.producer.poll(0)  # delivery reports
                if time.monotonic() - last_commit >= self.commit_interval_s:
                    self._commit()  # 3.
                    last_commit = time.monotonic()
        finally:
            self._close()

    # -- one event -------------------------------------------------------------------------

    def _process(self, msg: Message) -> None:
        topic, partition, offset = str(msg.topic()), int(msg.partition() or 0), msg.offset()
        requests = topic == self.requests_topic
        if requests:  # before anything else: its round trip overlaps all that follows
            self.requests.lock_ahead(msg.key())
        message, value = consumed(msg, self.codec)
        self.registry.partition = partition  # a registration goes where its request came
        handler = self.requests if requests else self.expiries
        run_to_end(handler.handle(message, value))
        # A partition revoked meanwhile is skipped: its next owner handles the event again.
        self.consumer.store_offsets([TopicPartition(topic, partition, int(offset or 0) + 1)])

    def _sender(self, topic: str) -> Callable[[str, Event], Any]:
        async def send(table_id: str, event: Event) -> None:
            self.produce(topic, table_id.encode(), event)

        return send

    def produce(self, topic: str, key: bytes | None, event: Event) -> None:
        """Hand ``event`` to librdkafka (sent at once: no linger)."""
        self._produce(topic, self.codec.encode(event.name, event.record), key=key)

    def _produce_registration(
        self,
        key: bytes,
        value: bytes,
        partition: int,
        on_delivery: Callable[[KafkaError | None, Message], None],
    ) -> None:
        self._produce(
            self.changelog_topic, value, key=key, partition=partition, on_delivery=on_delivery
        )

    async def _persisted(self) -> None:
        self.registry.wait_durable(self.settings.kafka.request_timeout_s)

    def _produce(self, topic: str, value: bytes, **kwargs: Any) -> None:
        self.outbox.produce(topic, value, **kwargs)

    def _commit(self) -> None:
        """Flush the producer (transitions, results, registrations, dead letters), then
        commit the stored offsets; nothing is committed past an undelivered write."""
        self.outbox.commit(self.consumer)

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
        self._commit()
        self.registry.forget_all()

    def _on_lost(self, partitions: list[TopicPartition]) -> None:
        self.membership.lost()
        self.registry.forget_all()

    def _close(self) -> None:
        try:
            self._commit()
            self.consumer.close()
        finally:
            self.producer.flush(self.settings.kafka.request_timeout_s)
