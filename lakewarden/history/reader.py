"""Reading one table's events back from the ``lakewarden.*`` topics: a bounded read.

The read never waits for new events: it captures every partition's high watermark first,
assigns the partitions (no consumer group is joined and no offset is committed, so reading
changes nothing for the services) and stops when each partition reached its captured end.

1. List the topics; a topic that does not exist is skipped.
2. Per partition: the watermarks (low, high), the start offset (the low watermark, or the
   first offset at or after ``since_ms``) and the end (the high watermark, or the first
   offset at or after ``until_ms``: a read of a window of time stops there).
3. Read until every partition reached its end (or ``timeout_s`` passed: then
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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from lakewarden.errors import RetryableError
from lakewarden.events._kafka_reader import EARLIEST, LATEST
from lakewarden.events.codec import EventCodec, EventDecodeError, epoch_ms_codec
from lakewarden.events.consumer import EventConsumer, EventConsumerError
from lakewarden.events.topics import TOPICS, TopicSpec
from lakewarden.extras import missing_extra
from lakewarden.history.model import Recorded, RetentionGap, Unreadable
from lakewarden.settings import Settings

try:
    from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, TopicPartition
except ImportError as err:
    raise missing_extra("kafka", "Kafka support", err) from err

log = logging.getLogger(__name__)


class ReadTimeoutError(RetryableError):
    """The topics were not read to their end within the time allowed."""


@dataclass
class PartitionRead:
    """Where the read of one partition starts, where it stops and how far it got."""

    topic: str
    partition: int
    start: int
    high: int  # where the read stops: the high watermark, or the end of the time window
    low: int
    first_kept_ms: int | None = None
    next: int = -1  # the offset after the last one read (from ``start`` on)

    def __post_init__(self) -> None:
        if self.next < 0:
            self.next = self.start


def read_table_events(
    settings: Settings,
    table_id: str,
    *,
    since_ms: int | None = None,
    until_ms: int | None = None,
    topics: Iterable[TopicSpec] = TOPICS,
    codec: EventCodec | None = None,
    timeout_s: float = 60.0,
) -> Iterator[Recorded | Unreadable | RetentionGap]:
    """The events of ``table_id`` on ``topics`` as they are now, partition order kept; with
    ``since_ms`` / ``until_ms`` only those whose Kafka timestamp is in that window.

    Raises:
        ConfigurationError: Kafka is not configured.
        RetryableError: the broker cannot be reached.
        ReadTimeoutError: the read did not reach the end of every partition in ``timeout_s``.
    """
    # Times as epoch ms: the history only computes with them (``fold.epoch_ms`` takes both).
    codec = codec or epoch_ms_codec()
    names = [spec.name(settings) for spec in topics]
    consumer = bulk_consumer(settings, codec)
    try:
        timeout = settings.kafka.request_timeout_s
        partitions = plan_read(consumer, names, since_ms, until_ms, timeout)  # 1, 2.
        yield from _read(consumer, partitions, codec, table_id, timeout_s)
        for p in partitions:  # 5.
            if p.low > 0 and p.start == p.low:
                yield RetentionGap(p.topic, p.partition, p.low, p.first_kept_ms)
    finally:
        consumer.close()


def bulk_consumer(settings: Settings, codec: EventCodec) -> EventConsumer:
    """A consumer for a bounded read: it only ``assign``s (no group is joined, no offset
    committed), hands out raw messages (the history decodes them itself, keeping the
    unreadable ones: step 4) and fetches in bulk (``BULK_READ_CONFIG``)."""
    return EventConsumer(
        settings,
        group_id=f"lakewarden-history-{uuid.uuid4()}",
        codec=codec,
        auto_commit=False,
        dead_letters=False,
        enable_partition_eof=False,
        logger=log,
        **BULK_READ_CONFIG,
    )


def plan_read(
    consumer: EventConsumer,
    names: list[str],
    since_ms: int | None,
    until_ms: int | None,
    timeout: float,
) -> list[PartitionRead]:
    """Steps 1 and 2 in a few requests: one for the metadata of every topic, one each for the
    low and high watermarks and the offsets by time of every partition (a request per topic
    and per partition would cost more than reading the events of a table).
    When a partition answers with an error, every partition is asked on its own (retried)."""
    try:
        found = consumer.partitions_of(names, timeout_s=timeout)
        for name in names:
            if name not in found:
                log.info("topic absent, skipped", extra={"kafka_topic": name})
        where = [(name, p) for name in names for p in found.get(name, [])]
        lows = consumer.offsets_for(where, EARLIEST, timeout_s=timeout)
        highs = consumer.offsets_for(where, LATEST, timeout_s=timeout)
        starts = lows
        if since_ms is not None and lows is not None and highs is not None:
            at = consumer.offsets_for(where, since_ms, timeout_s=timeout)
            starts = None if at is None else [_start(*a) for a in zip(at, lows, highs, strict=True)]
        ends = highs
        if until_ms is not None and highs is not None:
            at = consumer.offsets_for(where, until_ms, timeout_s=timeout)
            ends = None if at is None else [_end(*a) for a in zip(at, highs, strict=True)]
        if lows is None or highs is None or starts is None or ends is None:
            return [
                p
                for name in found
                for p in _plan_topic(consumer, name, since_ms, until_ms, timeout)
            ]
        return [
            PartitionRead(t, p, start, high, low)
            for (t, p), start, high, low in zip(where, starts, ends, lows, strict=True)
        ]
    except EventConsumerError as err:
        raise RetryableError(f"Cannot list topics: {err}. Help: is the broker up?") from err


def _start(found: int, low: int, high: int) -> int:
    """Where to start for ``--since``: the first offset that recent (-1: none is)."""
    if high <= low:
        return low
    return high if found < 0 else max(found, low)


def _end(found: int, high: int) -> int:
    """Where a read up to ``until_ms`` stops: the first offset that late (-1: none is)."""
    return high if found < 0 else min(found, high)


def _plan_topic(
    consumer: EventConsumer,
    name: str,
    since_ms: int | None,
    until_ms: int | None,
    timeout: float,
) -> list[PartitionRead]:
    """Step 2 for one topic, a request per partition, each retried (a new topic's partition
    may have no leader for a moment).

    Raises: EventConsumerError."""
    plan = []
    for number in consumer.partitions(name, timeout_s=timeout):
        low, high = consumer.watermarks(name, number, timeout_s=timeout)
        start = low
        if since_ms is not None and high > low:
            found = consumer.offset_at(name, number, since_ms, timeout_s=timeout)
            start = _start(found, low, high)
        if until_ms is not None and high > low:
            high = _end(consumer.offset_at(name, number, until_ms, timeout_s=timeout), high)
        plan.append(PartitionRead(name, number, start, high, low))
    return plan


def _read(
    consumer: EventConsumer,
    partitions: list[PartitionRead],
    codec: EventCodec,
    table_id: str,
    timeout_s: float,
) -> Iterator[Recorded | Unreadable]:
    """Step 3 and 4: the hot loop of every history command (a million events for a replay),
    so it calls each message accessor once, and a message keyed by the table (every topic's
    but lock.replies') is decoded inline; any other, or one that does not decode, goes
    through ``decode_message``."""
    remaining: dict[tuple[str, int], PartitionRead] = {
        (p.topic, p.partition): p for p in partitions if p.start < p.high
    }
    if not remaining:
        return
    consumer.assign([TopicPartition(p.topic, p.partition, p.start) for p in remaining.values()])
    deadline = time.monotonic() + timeout_s
    slow = _decoder(codec, table_id)
    decode = codec.decode
    table_key = table_id.encode()
    while remaining:  # 3.
        check_deadline(deadline, remaining, table_id, timeout_s)
        # consume() waits its whole timeout for a batch it cannot fill: never ask for more
        # than the messages left below the ends (a short read would wait 0.5 s at its end).
        unread = sum(p.high - p.next for p in remaining.values())
        batch = consumer.consume(max(1, min(READ_BATCH, unread)), 0.5)  # errors: logged by it
        for msg in batch:
            topic, partition = where = (msg.topic() or "", msg.partition() or 0)
            offset = msg.offset() or 0
            kind, stamp = msg.timestamp()
            broker_ms = None if kind == TIMESTAMP_NOT_AVAILABLE else stamp
            part = remaining.get(where)
            if part is None or offset >= part.high:
                # Past the end planned in step 2: the consumer keeps fetching a partition
                # that is done while others are read, and one batch may run past an end.
                # Kept, a later event (a grant) would come without its cause on another
                # topic (the release read before that topic's end), or past ``until_ms``.
                continue
            part.next = offset + 1
            if offset == part.low and part.first_kept_ms is None:
                part.first_kept_ms = broker_ms
            if part.next >= part.high:
                del remaining[where]
            value, key = msg.value() or b"", msg.key()
            if key == table_key:  # 4., decode_message's common case inlined
                try:
                    name, record = decode(value)
                except EventDecodeError:
                    pass  # decode_message reports it
                else:
                    if record["envelope"].get("table_id") == table_id:
                        yield _new_recorded(
                            Recorded, (name, record, topic, partition, offset, broker_ms)
                        )
                    continue
            item = slow(value, key, topic, partition, offset, broker_ms)
            if item is not None:
                yield item


# Messages asked of one ``consume`` call: its per-call cost vanishes, the batch stays small.
READ_BATCH: Final = 10_000
# librdkafka's fetch settings for reading a topic from an offset to its end as fast as it
# can: the defaults (1 MB per partition per fetch) suit a service waiting for new events; a
# bulk read of a million events wants each fetch to bring tens of thousands of them, so
# that the Python loop, not the round trips, sets the pace. ``queued.max.messages.kbytes``
# bounds the read-ahead (its memory).
BULK_READ_CONFIG: Final[dict[str, Any]] = {
    "fetch_max_bytes": 64 * 1024 * 1024,
    "max_partition_fetch_bytes": 16 * 1024 * 1024,
    "queued_max_messages_kbytes": 128 * 1024,
    "queued_min_messages": 1_000_000,
}


def check_deadline(
    deadline: float,
    remaining: dict[tuple[str, int], PartitionRead],
    table_id: str,
    timeout_s: float,
) -> None:
    """Raise when the read's time is up with partitions still short of their ends.

    Raises: ReadTimeoutError, naming those partitions."""
    if time.monotonic() >= deadline:
        left = ", ".join(f"{p.topic}[{p.partition}]" for p in remaining.values())
        raise ReadTimeoutError(
            f"read of table {table_id}'s events did not reach the end of {left} within "
            f"{timeout_s:g} s. Help: retry, or pass a longer timeout."
        )


def _decoder(
    codec: EventCodec, table_id: str
) -> Callable[[bytes, bytes | None, str, int, int, int | None], Recorded | Unreadable | None]:
    """``decode_message`` for one table, its arguments bound (the table's key encoded once)."""
    table_key = table_id.encode()

    def decode(
        value: bytes,
        key: bytes | None,
        topic: str,
        partition: int,
        offset: int,
        broker_ms: int | None,
    ) -> Recorded | Unreadable | None:
        return decode_message(
            value,
            key,
            table_id=table_id,
            codec=codec,
            topic=topic,
            partition=partition,
            offset=offset,
            broker_ms=broker_ms,
            table_key=table_key,
        )

    return decode


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
    table_key: bytes | None = None,
) -> Recorded | Unreadable | None:
    """One message as the history sees it: the event when it is about ``table_id``; an
    ``Unreadable`` when it does not decode (malformed, or written with a schema this process
    does not know, e.g. a newer version) and its key is the table's or absent; else None.
    ``table_key``: ``table_id.encode()``, when the caller has it.
    """
    table_key = table_key or table_id.encode()
    try:
        if key != table_key:  # lock replies are keyed by client: read the envelope
            _, envelope = codec.decode_envelope(value)
            if envelope.get("table_id") != table_id:
                return None
        name, record = codec.decode(value)
        if record["envelope"].get("table_id") != table_id:
            return None  # keyed by the table, but about another: not this table's event
    except EventDecodeError as err:
        if key not in (table_key, None):
            return None  # another table's bad message: not ours to report
        return Unreadable(topic, partition, offset, err.reason, str(err))
    return _new_recorded(Recorded, (name, record, topic, partition, offset, broker_ms))


# NamedTuple's generated __new__ is Python code; tuple.__new__ builds the same object faster.
_new_recorded = tuple.__new__
