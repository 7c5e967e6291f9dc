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

from confluent_kafka import Message, TopicPartition

from lakewarden.events import EventCodec
from lakewarden.events.topics import CANCEL_REQUESTS, CANCEL_RESULTS, HEARTBEAT_EXPIRED, TIMELINE
from lakewarden.settings import Settings
from lakewarden.table import Coordinator
from lakewarden_services._common.loop_service import (
    HandlerSuspendedError,
    consumed,
    inline,
    run_to_end,
)
from lakewarden_services._common.registry import RegistryLoop
from lakewarden_services._common.settings import Group
from lakewarden_services.cancel_manager.app import SERVICE, TABLES_CHANGELOG
from lakewarden_services.cancel_manager.handler import ExpiryHandler, RequestHandler
from lakewarden_services.cancel_manager.worker import CancelWorker

__all__ = ["HandlerSuspendedError", "Loop"]

log = logging.getLogger(__name__)


class Loop(RegistryLoop):
    """Runs cancel-manager until ``stop`` is set (see the module doc). ``on_ready`` is called
    once, after the first assignment (and its recovery) completed."""

    def __init__(
        self,
        settings: Settings,
        coordinator: Callable[[], Coordinator],
        *,
        group: Group,
        commit_interval_s: float,
        on_ready: Callable[[], None] = lambda: None,
        codec: EventCodec | None = None,
    ) -> None:
        # ``range`` assignment: partition P of requests and of expiries together.
        super().__init__(
            settings,
            group,
            service=SERVICE,
            topics=(CANCEL_REQUESTS.name(settings), TABLES_CHANGELOG.name(settings)),
            on_ready=on_ready,
            codec=codec,
        )
        self.commit_interval_s = commit_interval_s
        self.requests_topic = self.registrations_topic
        self.expired_topic = HEARTBEAT_EXPIRED.name(settings)
        results, timeline = CANCEL_RESULTS.name(settings), TIMELINE.name(settings)
        worker = CancelWorker(settings, coordinator)
        self.requests = RequestHandler(
            worker=worker,
            run_blocking=inline,
            send_result=self.sender(results),
            send_transition=self.sender(timeline),
            dead_letters=self.dead_letters,
            producer_id=SERVICE,
            registry=self.registry,
            persisted=self.persisted,
        )
        self.expiries = ExpiryHandler(
            worker=worker,
            run_blocking=inline,
            send_transition=self.sender(timeline),
            dead_letters=self.dead_letters,
            producer_id=SERVICE,
            registry=self.registry,
        )

    def run(self, stop: threading.Event) -> None:
        """The loop (see the module doc) until ``stop`` is set; then commit and close.

        Raises:
            EventConsumerError: the consumer failed fatally or the registry could not be read.
        """
        self.subscribe([self.requests_topic, self.expired_topic])
        last_commit = time.monotonic()
        try:
            while not stop.is_set():
                for msg in self.polled():  # 1.
                    self._process(msg)  # 2.
                self.producer.poll(0)  # delivery reports
                if time.monotonic() - last_commit >= self.commit_interval_s:
                    self.commit()  # 3.
                    last_commit = time.monotonic()
        finally:
            self.close()

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
