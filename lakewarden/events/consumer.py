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

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from lakewarden.errors import RetryableError
from lakewarden.events.codec import EventCodec, EventDecodeError, default_codec
from lakewarden.events.dlq import Rejection, dead_letter_record
from lakewarden.events.producer import EventProducer
from lakewarden.events.topics import DLQ, TopicSpec
from lakewarden.settings import Settings

log = logging.getLogger(__name__)

Partitions = list[TopicPartition]
RebalanceCallback = Callable[[Partitions], None]

# A topic created a moment ago may have no partition leader yet: worth asking again.
_NO_LEADER_YET = (
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
)


class EventConsumerError(RetryableError):
    """The broker could not be read (unreachable, a metadata, offsets or commit request
    failed) or the consumer failed fatally."""


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


class EventConsumer:
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
        self.settings = settings
        self.group_id = group_id or f"{settings.kafka.client_id}-{uuid.uuid4().hex}"
        self.consumer_id = consumer_id or f"{settings.kafka.client_id}:{self.group_id}"
        self.topics = [t if isinstance(t, str) else t.name(settings) for t in topics]
        self.auto_commit = auto_commit
        self.dead_letters = dead_letters
        self.dlq_topic = dlq_topic
        self.on_dead_letter = on_dead_letter
        self._codec = codec
        self._dlq = dlq_producer
        self._owns_dlq = dlq_producer is None
        self._config: dict[str, Any] = {
            # Offsets are stored once the caller is done with a message, never by librdkafka.
            "enable_auto_commit": auto_commit,
            "enable_auto_offset_store": False,
            "auto_offset_reset": "earliest",
            # librdkafka's own log lines go to this module's logger instead of stderr.
            "logger": log,
            **config,
        }
        self._consumer: Consumer | None = None
        self._placed = False  # subscribed or assigned
        self._pending: Message | None = None
        self.dead_lettered = 0

    @property
    def codec(self) -> EventCodec:
        if self._codec is None:
            self._codec = default_codec()
        return self._codec

    # -- where to read -------------------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[TopicSpec | str] | None = None,
        *,
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
        on_lost: RebalanceCallback | None = None,
    ) -> None:
        """Join the group on ``topics`` (default: those given to ``__init__``); the callbacks
        run inside ``poll``/``consume`` with the partitions concerned."""
        if topics is not None:
            self.topics = [t if isinstance(t, str) else t.name(self.settings) for t in topics]
        callbacks: dict[str, Callable[[Consumer, Partitions], None]] = {}
        for name, callback in (("on_assign", on_assign), ("on_revoke", on_revoke)):
            if callback is not None:
                callbacks[name] = _drop_consumer(callback)
        if on_lost is not None:
            callbacks["on_lost"] = _drop_consumer(on_lost)
        self._client().subscribe(self.topics, **callbacks)
        self._placed = True

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        """Read exactly ``partitions`` from their offsets (no group membership)."""
        self._client().assign(list(partitions))
        self._placed = True

    def assignment(self) -> Partitions:
        """The partitions currently assigned (none before ``subscribe``/``assign``)."""
        return [] if self._consumer is None else list(self._consumer.assignment())

    def partitions(self, topic: str, *, timeout_s: float) -> list[int]:
        """The partition ids of ``topic``, sorted; ``[]`` when it does not exist.

        Raises:
            EventConsumerError: the broker did not answer within ``timeout_s``.
        """
        try:
            metadata = self._client().list_topics(topic, timeout=timeout_s).topics.get(topic)
        except KafkaException as err:
            raise EventConsumerError(f"cannot read the metadata of {topic}: {err}") from err
        if metadata is None or metadata.error is not None or not metadata.partitions:
            return []
        return sorted(metadata.partitions)

    def watermarks(self, topic: str, partition: int, *, timeout_s: float) -> tuple[int, int]:
        """``(low, high)`` of the partition, asked from the broker (never cached). A partition
        of a new topic may have no leader for a moment: retriable errors are retried until
        ``timeout_s``.

        Raises:
            EventConsumerError: a non-retriable error, or still failing after ``timeout_s``.
        """
        tp = TopicPartition(topic, partition)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                low, high = self._client().get_watermark_offsets(
                    tp, timeout=max(deadline - time.monotonic(), 0.1), cached=False
                )
                return int(low), int(high)
            except KafkaException as err:
                if not _retriable(err) or time.monotonic() >= deadline:
                    raise EventConsumerError(
                        f"cannot read the offsets of {topic} [{partition}]: {err}"
                    ) from err
                time.sleep(0.1)

    def positions(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        """The next offset to read of each assigned partition (negative: nothing read yet)."""
        tps = [TopicPartition(topic, p) for p in partitions]
        return {tp.partition: int(tp.offset) for tp in self._client().position(tps)}

    # -- reading ---------------------------------------------------------------------------

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

    def poll_message(self, timeout_s: float) -> Message | None:
        """The next message as it is (not decoded), or ``None`` after ``timeout_s``. Returns
        as soon as one is there. Consumer errors are logged (librdkafka recovers from them),
        not returned.

        Raises:
            EventConsumerError: the consumer failed fatally.
        """
        consumer = self._started()
        deadline = time.monotonic() + timeout_s
        while True:
            msg = consumer.poll(max(0.0, deadline - time.monotonic()))
            if msg is None:
                return None
            error = msg.error()
            if error is None:
                return msg
            self._on_error(error)
            if time.monotonic() >= deadline:
                return None

    def consume(self, max_messages: int, timeout_s: float) -> list[Message]:
        """Up to ``max_messages`` messages as they are; waits up to ``timeout_s`` unless the
        batch fills (for throughput: a latency-sensitive reader uses ``poll_message``).

        Raises:
            EventConsumerError: the consumer failed fatally.
        """
        batch = self._started().consume(num_messages=max_messages, timeout=timeout_s)
        good = []
        for msg in batch:
            error = msg.error()
            if error is None:
                good.append(msg)
            else:
                self._on_error(error)
        return good

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
                log.warning("skipped an undecodable message: %s", err, extra=_where(msg))
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
        rejection = Rejection.of(why)
        record = dead_letter_record(
            rejection,
            topic=str(msg.topic()),
            partition=int(msg.partition() or 0),
            offset=int(msg.offset() or 0),
            key=msg.key(),
            value=msg.value() or b"",
            producer_id=self.consumer_id,
            consumer_group=self.group_id,
            codec=self.codec,
        )
        dlq = self._dlq_producer()
        dlq.send("DeadLetter", record, topic=self.dlq_topic)
        dlq.flush()  # 1. durable in the DLQ before any offset passes it
        if self.auto_commit:
            self._store(msg)
            self._commit(None)  # 2. skip the poison message for good
        self.dead_lettered += 1
        if self.on_dead_letter is not None:
            self.on_dead_letter(rejection)
        where = {**_where(msg), "reason": rejection.reason, "consumer_group": self.group_id}
        log.warning("dead-lettered a message: %s", rejection.detail, extra=where)

    # -- offsets ---------------------------------------------------------------------------

    def store_offsets(self, offsets: Sequence[TopicPartition]) -> None:
        """Store ``offsets`` (the next offset to read) for the next commit. A partition revoked
        meanwhile is skipped: its next owner reads those messages again (at-least-once)."""
        if self._consumer is None or not offsets:
            return
        try:
            self._consumer.store_offsets(offsets=list(offsets))
        except KafkaException as err:
            log.info("offsets not stored: %s", err)

    def commit(self, offsets: Sequence[TopicPartition] | None = None) -> None:
        """Commit synchronously: ``offsets`` if given, else the stored offsets (with
        ``auto_commit``, the last returned event is marked processed first).

        Raises:
            EventConsumerError: the commit failed.
        """
        if self._consumer is None:
            return
        self._mark_done()
        self._commit(offsets)

    def close(self) -> None:
        """Leave the group (with ``auto_commit``, stored offsets are committed) and close an
        owned DLQ producer. The last returned event is *not* marked processed; call
        ``commit()`` first for that.

        Raises:
            EventDeliveryError: the owned DLQ producer could not flush.
        """
        consumer, self._consumer, self._pending = self._consumer, None, None
        self._placed = False
        if consumer is not None:
            consumer.close()
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

    def _client(self) -> Consumer:
        if self._consumer is None:
            config = self.settings.kafka.librdkafka_config(group_id=self.group_id, **self._config)
            self._consumer = Consumer(config)
        return self._consumer

    def _started(self) -> Consumer:
        """The client, subscribed to ``topics`` if it was neither subscribed nor assigned."""
        consumer = self._client()
        if not self._placed and self.topics:
            self.subscribe()
        return consumer

    def _dlq_producer(self) -> EventProducer:
        if self._dlq is None:
            self._dlq = EventProducer(self.settings, producer_id=self.consumer_id, codec=self.codec)
        return self._dlq

    def _mark_done(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            self._store(pending)

    def _store(self, msg: Message) -> None:
        """Store the offset past ``msg`` (skipped, like ``store_offsets``, when revoked)."""
        assert self._consumer is not None, "created before anything is read"
        try:
            self._consumer.store_offsets(message=msg)
        except KafkaException as err:
            log.info("offset not stored: %s", err, extra=_where(msg))

    def _commit(self, offsets: Sequence[TopicPartition] | None) -> None:
        assert self._consumer is not None, "created before anything is read"
        try:
            if offsets is None:
                self._consumer.commit(asynchronous=False)
            elif offsets:
                self._consumer.commit(offsets=list(offsets), asynchronous=False)
        except KafkaException as err:
            error = err.args[0] if err.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError._NO_OFFSET:
                return  # nothing new to commit
            raise EventConsumerError(
                f"Offset commit failed for group {self.group_id}: {err}"
            ) from err

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():
            raise EventConsumerError(f"Consumer {self.consumer_id} failed: {error.str()}")
        if error.code() == KafkaError._PARTITION_EOF:
            return
        # Transient errors (broker down, rebalance in progress): librdkafka recovers by itself.
        log.warning("consumer error: %s", error.str(), extra={"kafka_error": error.code()})


def _drop_consumer(callback: RebalanceCallback) -> Callable[[Consumer, Partitions], None]:
    def call(consumer: Consumer, partitions: Partitions) -> None:
        callback(partitions)

    return call


def _retriable(err: KafkaException) -> bool:
    error = err.args[0] if err.args else None
    return isinstance(error, KafkaError) and (error.retriable() or error.code() in _NO_LEADER_YET)


def _where(msg: Message) -> dict[str, Any]:
    return {
        "kafka_topic": msg.topic(),
        "kafka_partition": msg.partition(),
        "kafka_offset": msg.offset(),
    }
