"""EventConsumer: poll, decode, and dead-letter what cannot be decoded.

Delivery is at-least-once. Calling ``poll`` again (or advancing ``events()``) declares the
event returned before processed: its offset is stored and librdkafka's auto-commit commits it.
An event returned but not followed by another ``poll`` or by ``commit()`` is delivered again
after a restart or rebalance, so handlers must be idempotent.

A message that does not decode (``EventDecodeError``) is never handed to the caller:
1. a ``DeadLetter`` with the reason, the source topic/partition/offset, the key and the
   original bytes is produced to ``<prefix>dlq`` and flushed (durable before going on);
2. the offset past the poison message is committed synchronously;
3. consuming continues with the next message.
If the dead letter cannot be delivered, ``poll`` raises and nothing is committed, so the
message is not lost: it is read again by whoever consumes the partition next.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError, KafkaException, Message

from lakewarden.errors import RetryableError
from lakewarden.events.codec import EventCodec, EventDecodeError, default_codec
from lakewarden.events.dlq import dead_letter_record
from lakewarden.events.producer import EventProducer
from lakewarden.events.topics import DLQ, TopicSpec
from lakewarden.settings import Settings

log = logging.getLogger(__name__)

_DEFAULT_CONFIG: dict[str, Any] = {
    # Offsets are stored by us once the caller is done with an event, committed by librdkafka.
    "enable_auto_commit": True,
    "enable_auto_offset_store": False,
    "auto_offset_reset": "earliest",
    # librdkafka's own log lines go to this module's logger instead of stderr.
    "logger": log,
}


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
    """Consumes lakewarden events from ``topics`` in consumer group ``group_id``.

    Not thread-safe (neither is a librdkafka consumer's poll loop). No network IO happens in
    ``__init__``; the client is created and subscribed on the first ``poll``.
    ``config`` overrides librdkafka settings with underscores for dots.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        group_id: str,
        topics: Iterable[TopicSpec | str],
        consumer_id: str | None = None,
        codec: EventCodec | None = None,
        dlq_producer: EventProducer | None = None,
        **config: Any,
    ) -> None:
        self.settings = settings
        self.group_id = group_id
        self.consumer_id = consumer_id or f"{settings.kafka.client_id}:{group_id}"
        self.topics = [t if isinstance(t, str) else t.name(settings) for t in topics]
        self._codec = codec
        self._dlq = dlq_producer
        self._owns_dlq = dlq_producer is None
        self._config = {**_DEFAULT_CONFIG, **config}
        self._consumer: Consumer | None = None
        self._pending: Message | None = None
        self.dead_lettered = 0

    @property
    def codec(self) -> EventCodec:
        if self._codec is None:
            self._codec = default_codec()
        return self._codec

    def poll(self, timeout_s: float = 1.0) -> ConsumedEvent | None:
        """Mark the previous event processed and return the next decodable one, or ``None``
        if none arrived within ``timeout_s``. Undecodable messages are dead-lettered on the way.

        Raises:
            EventDeliveryError: a dead letter could not be delivered (nothing was committed).
            RetryableError: the consumer hit a fatal error or a commit failed.
        """
        consumer = self._client()
        self._mark_done(consumer)
        deadline = time.monotonic() + timeout_s
        while True:
            msg = consumer.poll(max(0.0, deadline - time.monotonic()))
            if msg is None:
                return None
            error = msg.error()
            if error is not None:
                self._on_error(error)
            else:
                event = self._decode(consumer, msg)
                if event is not None:
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

    def commit(self) -> None:
        """Mark the last returned event processed and commit stored offsets synchronously.

        Raises:
            RetryableError: the commit failed.
        """
        if self._consumer is None:
            return
        self._mark_done(self._consumer)
        self._commit(self._consumer)

    def close(self) -> None:
        """Leave the group (stored offsets are committed) and close an owned DLQ producer.
        The last returned event is *not* marked processed; call ``commit()`` first for that.

        Raises:
            EventDeliveryError: the owned DLQ producer could not flush.
        """
        consumer, self._consumer, self._pending = self._consumer, None, None
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

    def _client(self) -> Consumer:
        if self._consumer is None:
            config = self.settings.kafka.librdkafka_config(group_id=self.group_id, **self._config)
            # librdkafka key is "group.id"; the settings adapter turns "_" into ".".
            self._consumer = Consumer(config)
            self._consumer.subscribe(self.topics)
        return self._consumer

    def _decode(self, consumer: Consumer, msg: Message) -> ConsumedEvent | None:
        value = msg.value() or b""
        try:
            name, record = self.codec.decode(value)
        except EventDecodeError as err:
            self._dead_letter(consumer, msg, value, err)
            return None
        self._pending = msg
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

    def _dead_letter(
        self, consumer: Consumer, msg: Message, value: bytes, err: EventDecodeError
    ) -> None:
        where = {
            "kafka_topic": msg.topic(),
            "kafka_partition": msg.partition(),
            "kafka_offset": msg.offset(),
            "decode_reason": err.reason,
            "consumer_group": self.group_id,
        }
        record = dead_letter_record(
            err,
            topic=str(msg.topic()),
            partition=int(msg.partition() or 0),
            offset=int(msg.offset() or 0),
            key=msg.key(),
            value=value,
            producer_id=self.consumer_id,
            consumer_group=self.group_id,
            codec=self.codec,
        )
        dlq = self._dlq_producer()
        dlq.send("DeadLetter", record, topic=DLQ)
        dlq.flush()  # 1. durable in the DLQ before we commit past it
        consumer.store_offsets(message=msg)
        self._commit(consumer)  # 2. skip the poison message for good
        self.dead_lettered += 1
        log.warning("dead-lettered an undecodable message: %s", err, extra=where)

    def _dlq_producer(self) -> EventProducer:
        if self._dlq is None:
            self._dlq = EventProducer(self.settings, producer_id=self.consumer_id, codec=self.codec)
        return self._dlq

    def _mark_done(self, consumer: Consumer) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            consumer.store_offsets(message=pending)
        except KafkaException as err:
            # The partition was revoked meanwhile: its new owner gets the event again
            # (at-least-once), which is what an unstored offset means.
            log.info(
                "offset not stored: %s",
                err,
                extra={"kafka_topic": pending.topic(), "kafka_offset": pending.offset()},
            )

    def _commit(self, consumer: Consumer) -> None:
        try:
            consumer.commit(asynchronous=False)
        except KafkaException as err:
            error = err.args[0] if err.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError._NO_OFFSET:
                return  # nothing new to commit
            raise RetryableError(f"Offset commit failed for group {self.group_id}: {err}") from err

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():
            raise RetryableError(f"Consumer {self.consumer_id} failed: {error.str()}")
        # Transient errors (broker down, rebalance in progress): librdkafka recovers by itself.
        log.warning("consumer error: %s", error.str(), extra={"kafka_error": error.code()})
