"""EventConsumer: the one Kafka consumer of lakewarden (clients, services, tests).

It covers what every reader of a topic needs, so none builds a confluent-kafka consumer by
hand: librdkafka settings from ``Settings`` (the one adapter, ``KafkaSettings.librdkafka_config``),
group subscription (with rebalance callbacks) or manual assignment, polling with a timeout
(``poll`` returns at the first message: latency-sensitive readers never wait for a batch),
batches for throughput (``consume``), Avro decoding, dead-lettering, and offsets stored and
committed either by the consumer (``auto_commit=True``) or by the caller.

Two ways to read:

- events: ``poll`` / ``events()`` decode each message; an undecodable one is dead-lettered and
  never handed to the caller;
- messages: ``poll_message`` / ``consume`` hand over raw messages (a reader that filters by
  key before decoding, reads JSON, or decodes in a pure state module); ``decode`` and
  ``dead_letter`` are there for it.

Offsets with ``auto_commit=True`` (the default): delivery is at-least-once. Calling ``poll``
again (or advancing ``events()``) declares the event returned before processed: its offset
is stored and librdkafka's auto-commit commits it. An event returned but not followed by
another ``poll`` or by ``commit()`` is delivered again after a restart or rebalance, so
handlers must be idempotent. With ``auto_commit=False`` nothing is stored or committed unless
the caller does (``store_offsets``, ``commit``), as a service that commits below what it
still buffers must.

A message that does not decode is dead-lettered (``dead_letters=True``):
1. a ``DeadLetter`` with the reason, the source topic/partition/offset, the key and the
   original bytes is produced to the DLQ topic and flushed (durable before going on);
2. with ``auto_commit``, the offset past the poison message is committed synchronously;
3. consuming continues with the next message.
If the dead letter cannot be delivered, ``poll`` raises and nothing is committed, so the
message is not lost: it is read again by whoever consumes the partition next. With
``dead_letters=False`` (a client reading replies meant for it) it is logged and skipped.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from lakewarden.events._kafka_reader import (
    EventConsumerError,
    KafkaReader,
    Partitions,
    RebalanceCallback,
    log,
    where,
)
from lakewarden.events.codec import EventCodec, EventDecodeError, default_codec
from lakewarden.events.dlq import Rejection, dead_letter_record
from lakewarden.events.producer import EventProducer
from lakewarden.events.topics import DLQ, TopicSpec
from lakewarden.extras import missing_extra
from lakewarden.settings import Settings

try:
    from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Message, TopicPartition
except ImportError as err:
    raise missing_extra("kafka", "Kafka support", err) from err


@dataclass(frozen=True, slots=True)
class ConsumedEvent:
    """A decoded event and where it came from (``timestamp_ms``: the message timestamp)."""

    name: str
    record: dict[str, Any]
    topic: str
    partition: int
    offset: int
    key: bytes | None
    timestamp_ms: int | None


@dataclass(frozen=True, slots=True)
class HeldMessage:
    """A consumed message kept by a caller that decides about it later (error-sink holds
    records until their instant ends): its original bytes and where it came from, all a dead
    letter needs."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes

    @classmethod
    def of(cls, msg: Message) -> HeldMessage:
        return cls(
            topic=str(msg.topic()),
            partition=int(msg.partition() or 0),
            offset=int(msg.offset() or 0),
            key=msg.key(),
            value=msg.value() or b"",
        )


class EventConsumer(KafkaReader):
    """Consumes lakewarden events; see the module doc.

    ``group_id``: the consumer group (``None``: a private id, for readers that only
    ``assign``). ``topics``: subscribed on the first poll unless ``subscribe`` or ``assign``
    was called. ``config`` overrides librdkafka settings, with underscores for dots
    (``fetch_wait_max_ms=100``). ``on_dead_letter`` is called with each rejection once its
    dead letter is durable (a service's metric). Not thread-safe (neither is a librdkafka
    consumer's poll loop). No network IO happens in ``__init__``.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        group_id: str | None = None,
        topics: Iterable[TopicSpec | str] = (),
        consumer_id: str | None = None,
        codec: EventCodec | None = None,
        auto_commit: bool = True,
        dead_letters: bool = True,
        dlq_producer: EventProducer | None = None,
        dlq_topic: TopicSpec | str = DLQ,
        on_dead_letter: Callable[[Rejection], None] | None = None,
        **config: Any,
    ) -> None:
        group = group_id or f"{settings.kafka.client_id}-{uuid.uuid4().hex}"
        super().__init__(
            settings,
            group_id=group,
            consumer_id=consumer_id or f"{settings.kafka.client_id}:{group}",
            topics=topics,
            auto_commit=auto_commit,
            config=config,
        )
        self.dead_letters = dead_letters
        self.dlq_topic = dlq_topic
        self.on_dead_letter = on_dead_letter
        self._codec = codec
        self._dlq = dlq_producer
        self._owns_dlq = dlq_producer is None
        self._pending: Message | None = None
        self.dead_lettered = 0

    @property
    def codec(self) -> EventCodec:
        if self._codec is None:
            self._codec = default_codec()
        return self._codec

    # -- events ----------------------------------------------------------------------------

    def poll(self, timeout_s: float = 1.0) -> ConsumedEvent | None:
        """Mark the previous event processed (``auto_commit``) and return the next decodable
        one, or ``None`` if none arrived within ``timeout_s``. Undecodable messages are
        dead-lettered on the way.

        Raises:
            EventDeliveryError: a dead letter could not be delivered (nothing was committed).
            EventConsumerError: the consumer failed fatally or a commit failed.
        """
        self._mark_done()
        deadline = time.monotonic() + timeout_s
        while True:
            msg = self.poll_message(max(0.0, deadline - time.monotonic()))
            if msg is None:
                return None
            event = self.decode(msg)
            if event is not None:
                if self.auto_commit:
                    self._pending = msg
                return event
            if time.monotonic() >= deadline:
                return None

    def events(
        self, *, idle_timeout_s: float | None = None, poll_timeout_s: float = 1.0
    ) -> Iterator[ConsumedEvent]:
        """Yield events until none arrived for ``idle_timeout_s`` (``None``: forever).

        Raises:
            as ``poll``.
        """
        idle_since = time.monotonic()
        while True:
            event = self.poll(poll_timeout_s)
            if event is not None:
                idle_since = time.monotonic()
                yield event
            elif idle_timeout_s is not None and time.monotonic() - idle_since >= idle_timeout_s:
                return

    def decode(self, msg: Message) -> ConsumedEvent | None:
        """The event in ``msg``; ``None`` when it does not decode (then it was dead-lettered,
        or, with ``dead_letters=False``, logged and skipped).

        Raises:
            as ``dead_letter``.
        """
        value = msg.value() or b""
        try:
            name, record = self.codec.decode(value)
        except EventDecodeError as err:
            if self.dead_letters:
                self.dead_letter(msg, err)
            else:
                log.warning("skipped an undecodable message: %s", err, extra=where(msg))
            return None
        kind, timestamp = msg.timestamp()
        return ConsumedEvent(
            name=name,
            record=record,
            topic=str(msg.topic()),
            partition=int(msg.partition() or 0),
            offset=int(msg.offset() or 0),
            key=msg.key(),
            timestamp_ms=None if kind == TIMESTAMP_NOT_AVAILABLE else timestamp,
        )

    def dead_letter(self, msg: Message, why: Rejection | EventDecodeError) -> None:
        """Send ``msg`` to the DLQ saying why and wait until it is durable (steps 1 and 2 of
        the module doc).

        Raises:
            EventDeliveryError: the dead letter could not be delivered.
            EventConsumerError: the commit past it failed (``auto_commit``).
        """
        source = HeldMessage.of(msg)
        rejection = self._send_dead_letter(source, why)  # 1.
        if self.auto_commit:
            self._store(msg)
            self._commit(None)  # 2. skip the poison message for good
        self._dead_lettered(rejection, where(msg))

    def dead_letter_held(self, source: HeldMessage, why: Rejection | EventDecodeError) -> None:
        """Send a message handled earlier (kept as ``source``: its bytes and where they came
        from) to the DLQ saying why, and wait until it is durable. Nothing is committed: the
        caller, which held the message, commits its offsets itself.

        Raises:
            EventDeliveryError: the dead letter could not be delivered.
        """
        rejection = self._send_dead_letter(source, why)
        place = {"topic": source.topic, "partition": source.partition, "offset": source.offset}
        self._dead_lettered(rejection, place)

    # -- offsets ---------------------------------------------------------------------------

    def commit(self, offsets: Sequence[TopicPartition] | None = None) -> None:
        """Commit synchronously: ``offsets`` if given, else the stored offsets (with
        ``auto_commit``, the last returned event is marked processed first).

        Raises:
            EventConsumerError: the commit failed.
        """
        self._mark_done()
        super().commit(offsets)

    def close(self) -> None:
        """Leave the group (with ``auto_commit``, stored offsets are committed) and close an
        owned DLQ producer. The last returned event is *not* marked processed; call
        ``commit()`` first for that.

        Raises:
            EventDeliveryError: the owned DLQ producer could not flush.
        """
        self._pending = None
        super().close()
        if self._owns_dlq and self._dlq is not None:
            self._dlq.close()

    def __enter__(self) -> EventConsumer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------

    def _dlq_producer(self) -> EventProducer:
        if self._dlq is None:
            self._dlq = EventProducer(self.settings, producer_id=self.consumer_id, codec=self.codec)
        return self._dlq

    def _send_dead_letter(
        self, source: HeldMessage, why: Rejection | EventDecodeError
    ) -> Rejection:
        rejection = Rejection.of(why)
        record = dead_letter_record(
            rejection,
            topic=source.topic,
            partition=source.partition,
            offset=source.offset,
            key=source.key,
            value=source.value,
            producer_id=self.consumer_id,
            consumer_group=self.group_id,
            codec=self.codec,
        )
        dlq = self._dlq_producer()
        dlq.send("DeadLetter", record, topic=self.dlq_topic)
        dlq.flush()  # durable in the DLQ before any offset passes it
        return rejection

    def _dead_lettered(self, rejection: Rejection, place: dict[str, Any]) -> None:
        self.dead_lettered += 1
        if self.on_dead_letter is not None:
            self.on_dead_letter(rejection)
        context = {**place, "reason": rejection.reason, "consumer_group": self.group_id}
        log.warning("dead-lettered a message: %s", rejection.detail, extra=context)

    def _mark_done(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            self._store(pending)


__all__ = [
    "ConsumedEvent",
    "EventConsumer",
    "EventConsumerError",
    "HeldMessage",
    "Partitions",
    "RebalanceCallback",
]
