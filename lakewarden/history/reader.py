"""Reading one table's events back from the ``lakewarden.*`` topics: a bounded read.

The read never waits for new events: it captures every partition's high watermark first,
assigns the partitions (no consumer group is joined and no offset is committed, so reading
changes nothing for the services) and stops when each partition reached its captured end.

1. List the topics; a topic that does not exist is skipped.
2. Per partition: the watermarks (low, high) and the start offset (the low watermark, or the
   first offset at or after ``since_ms``).
3. Read until every partition reached its high watermark (or ``timeout_s`` passed: then
   ``ReadTimeoutError``, never a silently partial story).
4. Keep the events whose envelope names the table. A message that does not decode is kept as
   ``Unreadable`` when its key is the table id (every topic but lock.replies is keyed by it).
5. Report a ``RetentionGap`` for each partition whose low watermark is above 0 when the read
   started there: older events are gone, and the story must say so.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Message, TopicPartition

from lakewarden.errors import RetryableError
from lakewarden.events.codec import EventCodec, EventDecodeError, epoch_ms_codec
from lakewarden.events.consumer import EventConsumer, EventConsumerError
from lakewarden.events.topics import TOPICS, TopicSpec
from lakewarden.history.model import Recorded, RetentionGap, Unreadable
from lakewarden.settings import Settings

log = logging.getLogger(__name__)


class ReadTimeoutError(RetryableError):
    """The topics were not read to their end within the time allowed."""


@dataclass
class _Partition:
    topic: str
    partition: int
    start: int
    high: int
    low: int
    first_kept_ms: int | None = None


def read_table_events(
    settings: Settings,
    table_id: str,
    *,
    since_ms: int | None = None,
    topics: Iterable[TopicSpec] = TOPICS,
    codec: EventCodec | None = None,
    timeout_s: float = 60.0,
) -> Iterator[Recorded | Unreadable | RetentionGap]:
    """The events of ``table_id`` on ``topics`` as they are now, partition order kept.

    Raises:
        ConfigurationError: Kafka is not configured.
        RetryableError: the broker cannot be reached.
        ReadTimeoutError: the read did not reach the end of every partition in ``timeout_s``.
    """
    # Times as epoch ms: the history only computes with them (``fold.epoch_ms`` takes both).
    codec = codec or epoch_ms_codec()
    names = [spec.name(settings) for spec in topics]
    # Raw messages: the history decodes them itself, keeping the unreadable ones (step 4).
    consumer = EventConsumer(
        settings,
        group_id=f"lakewarden-history-{uuid.uuid4()}",
        codec=codec,
        auto_commit=False,
        dead_letters=False,
        enable_partition_eof=False,
        logger=log,
    )
    try:
        partitions = _plan(consumer, names, since_ms, settings.kafka.request_timeout_s)  # 1, 2.
        yield from _read(consumer, partitions, codec, table_id, timeout_s)
        for p in partitions:  # 5.
            if p.low > 0 and p.start == p.low:
                yield RetentionGap(p.topic, p.partition, p.low, p.first_kept_ms)
    finally:
        consumer.close()


def _plan(
    consumer: EventConsumer, names: list[str], since_ms: int | None, timeout: float
) -> list[_Partition]:
    try:
        return [p for name in names for p in _plan_topic(consumer, name, since_ms, timeout)]
    except EventConsumerError as err:
        raise RetryableError(f"Cannot list topics: {err}. Help: is the broker up?") from err


def _plan_topic(
    consumer: EventConsumer, name: str, since_ms: int | None, timeout: float
) -> list[_Partition]:
    """Raises: EventConsumerError."""
    numbers = consumer.partitions(name, timeout_s=timeout)
    if not numbers:
        log.info("topic absent, skipped", extra={"kafka_topic": name})
    plan = []
    for number in numbers:
        low, high = consumer.watermarks(name, number, timeout_s=timeout)
        start = low
        if since_ms is not None and high > low:
            found = consumer.offset_at(name, number, since_ms, timeout_s=timeout)
            start = high if found < 0 else max(found, low)  # -1: nothing that recent
        plan.append(_Partition(name, number, start, high, low))
    return plan


def _read(
    consumer: EventConsumer,
    partitions: list[_Partition],
    codec: EventCodec,
    table_id: str,
    timeout_s: float,
) -> Iterator[Recorded | Unreadable]:
    remaining = {(p.topic, p.partition): p for p in partitions if p.start < p.high}
    if not remaining:
        return
    consumer.assign([TopicPartition(p.topic, p.partition, p.start) for p in remaining.values()])
    deadline = time.monotonic() + timeout_s
    while remaining:  # 3.
        if time.monotonic() >= deadline:
            left = ", ".join(f"{t}[{n}]" for t, n in sorted(remaining))
            raise ReadTimeoutError(
                f"read of table {table_id}'s events did not reach the end of {left} within "
                f"{timeout_s:g} s. Help: retry, or pass a longer timeout."
            )
        for msg in consumer.consume(1000, 0.5):  # consumer errors: logged by the consumer
            where = (str(msg.topic()), int(msg.partition() or 0))
            part = remaining.get(where)
            offset = int(msg.offset() or 0)
            if part is not None:
                if part.first_kept_ms is None and offset == part.low:
                    part.first_kept_ms = _timestamp(msg)
                if offset >= part.high - 1:
                    del remaining[where]
            item = decode_message(  # 4.
                msg.value() or b"",
                msg.key(),
                table_id=table_id,
                codec=codec,
                topic=where[0],
                partition=where[1],
                offset=offset,
                broker_ms=_timestamp(msg),
            )
            if item is not None:
                yield item


def decode_message(
    value: bytes,
    key: bytes | None,
    *,
    table_id: str,
    codec: EventCodec,
    topic: str = "",
    partition: int = 0,
    offset: int = 0,
    broker_ms: int | None = None,
) -> Recorded | Unreadable | None:
    """One message as the history sees it: the event when it is about ``table_id``; an
    ``Unreadable`` when it does not decode (malformed, or written with a schema this process
    does not know, e.g. a newer version) and its key is the table's or absent; else None.
    """
    try:
        if key != table_id.encode():  # lock replies are keyed by client: read the envelope
            _, envelope = codec.decode_envelope(value)
            if envelope.get("table_id") != table_id:
                return None
        name, record = codec.decode(value)
        if record["envelope"].get("table_id") != table_id:
            return None  # keyed by the table, but about another: not this table's event
    except EventDecodeError as err:
        if key not in (table_id.encode(), None):
            return None  # another table's bad message: not ours to report
        return Unreadable(topic, partition, offset, err.reason, str(err))
    return _new_recorded(Recorded, (name, record, topic, partition, offset, broker_ms))


# NamedTuple's generated __new__ is Python code; tuple.__new__ builds the same object faster.
_new_recorded = tuple.__new__


def _timestamp(msg: Message) -> int | None:
    kind, value = msg.timestamp()
    return None if kind == TIMESTAMP_NOT_AVAILABLE else int(value)
