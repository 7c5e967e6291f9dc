"""Replay's read of the timeline topic: ``consume`` batches folded as they arrive.

``lakewarden replay`` reads a table's ``TimelineTransition`` events exactly as
``read_table_events(topics=[TIMELINE])`` reads them (the same plan of partitions, start and
end offsets, consumer and fetch settings) and folds them into a ``TopicReplay`` as ``feed``
would; what differs is the loop, written for a million events:

1. Each ``consume`` batch goes whole to ``MessageFold.fold`` (no generator step, no
   ``Recorded`` and no bookkeeping per message; consumer errors are checked there, on the
   general path, instead of by a second walk over the batch).
2. How far each partition got is asked of the consumer once a batch (``position``: the
   offset after the last message handed out) rather than read from every message.
3. A partition whose oldest events were deleted (low watermark above 0, read from it) needs
   the broker time of its first kept event: the first batches are scanned for it alone.
4. The problems are returned: messages that do not decode (``Unreadable``) and, last, a
   ``RetentionGap`` per partition that lost its oldest events.

A read of at least ``CHECK_ELSEWHERE_FROM`` messages folds optimistically: the ``requested``,
``inflight`` and ``completed`` payloads (three an instant; on a real table the last two never
repeat, nor, for a streaming ingestion, the first) are folded as valid, a plain ``requested``
one unread (``_lean_fold``), and checked by a second process (``_validate.PayloadChecker``), each
batch's texts forwarded as the batch is folded. When the read ends its verdict is joined;
if any text was invalid, or the process failed, the same offsets are read again with every
payload validated in process (today's fold, exactly: an invalid payload is a rejection, and
one that is no JSON object makes no entry at all, which only a fresh read reproduces).
Smaller reads, and any read when no process can be started, validate in process: below
that size the process's start (~0.3 s of CPU) costs more than it saves.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict

from lakewarden.events.codec import epoch_ms_codec
from lakewarden.events.consumer import EventConsumer
from lakewarden.events.topics import TIMELINE
from lakewarden.extras import missing_extra
from lakewarden.history._message_fold import MessageFold
from lakewarden.history._validate import PayloadChecker
from lakewarden.history.model import RetentionGap, Unreadable
from lakewarden.history.reader import (
    READ_BATCH,
    PartitionRead,
    bulk_consumer,
    check_deadline,
    plan_read,
)
from lakewarden.history.replay import TopicReplay
from lakewarden.settings import Settings

try:
    from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Message, TopicPartition
except ImportError as err:
    raise missing_extra("kafka", "Kafka support", err) from err

log = logging.getLogger(__name__)

# Messages to read from which payloads are validated by a second process (see above).
CHECK_ELSEWHERE_FROM = 50_000


def replay_timeline(
    settings: Settings,
    table_id: str,
    replay: TopicReplay,
    *,
    since_ms: int | None = None,
    timeout_s: float = 60.0,
    check_elsewhere_from: int = CHECK_ELSEWHERE_FROM,
) -> list[Unreadable | RetentionGap]:
    """Fold the table's timeline events, as they are now, into ``replay`` (from the first
    event at or after ``since_ms`` when given); the problems met, in the order
    ``read_table_events`` reports them. ``check_elsewhere_from``: the read size (messages)
    from which payloads are validated by a second process.

    Raises:
        ConfigurationError: Kafka is not configured.
        RetryableError: the broker cannot be reached.
        ReadTimeoutError: the read did not reach the end of every partition in ``timeout_s``.
        ValueError: ``replay`` does not fold (built with ``fold=False``).
    """
    codec = epoch_ms_codec()
    consumer = bulk_consumer(settings, codec)
    checker: PayloadChecker | None = None
    try:
        timeout = settings.kafka.request_timeout_s
        names = [TIMELINE.name(settings)]
        partitions = plan_read(consumer, names, since_ms, None, timeout)
        if sum(p.high - p.start for p in partitions) >= check_elsewhere_from:
            checker = PayloadChecker.start()
        fold = MessageFold(
            replay, table_id, codec, on_error=consumer.on_error, optimistic=checker is not None
        )
        deadline = time.monotonic() + timeout_s
        unreadable = _fold_batches(
            consumer, partitions, fold, table_id, deadline, timeout_s, checker
        )
        if checker is not None:
            verdict = checker.verdict(max(1.0, deadline - time.monotonic()))
            if verdict is None:  # nothing known of any payload: slower, never wrong
                log.warning("payload checker process failed; reading the timeline again")
            if verdict is None or not verdict.all_valid:  # read again, validating here
                replay.reset()
                fold = MessageFold(replay, table_id, codec, on_error=consumer.on_error)
                for p in partitions:
                    p.next = p.start
                again = time.monotonic() + timeout_s  # a read of its own
                unreadable = _fold_batches(
                    consumer, partitions, fold, table_id, again, timeout_s, None
                )
        problems: list[Unreadable | RetentionGap] = []
        problems.extend(unreadable)
        for p in partitions:  # 4.
            if p.low > 0 and p.start == p.low:
                problems.append(RetentionGap(p.topic, p.partition, p.low, p.first_kept_ms))
        return problems
    finally:
        if checker is not None:
            checker.close()
        consumer.close()


def _fold_batches(
    consumer: EventConsumer,
    partitions: list[PartitionRead],
    fold: MessageFold,
    table_id: str,
    deadline: float,
    timeout_s: float,
    checker: PayloadChecker | None,
) -> list[Unreadable]:
    """Steps 1 to 3: read every partition to its end, folding each batch (and forwarding
    its unchecked payload texts to ``checker``).

    Raises: ReadTimeoutError, EventConsumerError."""
    remaining = {(p.topic, p.partition): p for p in partitions if p.start < p.high}
    if not remaining:
        return []
    consumer.assign([TopicPartition(p.topic, p.partition, p.start) for p in remaining.values()])
    unseen = {key: p for key, p in remaining.items() if p.low > 0 and p.start == p.low}
    unreadable: list[Unreadable] = []
    while remaining:
        check_deadline(deadline, remaining, table_id, timeout_s)
        # consume() waits its whole timeout for a batch it cannot fill: never ask for more
        # than the messages left below the ends.
        unread = sum(p.high - p.next for p in remaining.values())
        batch = consumer.consume_unchecked(max(1, min(READ_BATCH, unread)), 0.5)
        if not batch:
            continue
        if unseen:  # 3.
            _note_first_kept(batch, unseen)
        unreadable.extend(fold.fold(batch))  # 1.
        if checker is not None:
            checker.send(*fold.unchecked())
        _advance(consumer, remaining)  # 2.
    return unreadable


def _note_first_kept(batch: list[Message], unseen: dict[tuple[str, int], PartitionRead]) -> None:
    """The broker time of the first event kept by each partition in ``unseen`` that
    ``batch`` holds (when it is at the low watermark); found ones leave ``unseen``."""
    for msg in batch:
        if msg.error() is not None:
            continue
        p = unseen.pop((msg.topic() or "", msg.partition() or 0), None)
        if p is not None and msg.offset() == p.low:
            kind, stamp = msg.timestamp()
            p.first_kept_ms = None if kind == TIMESTAMP_NOT_AVAILABLE else stamp
        if not unseen:
            return


def _advance(consumer: EventConsumer, remaining: dict[tuple[str, int], PartitionRead]) -> None:
    """Each partition's next offset from the consumer's positions; the ones that reached
    their end leave ``remaining``."""
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, number in remaining:
        by_topic[topic].append(number)
    for topic, numbers in by_topic.items():
        for number, offset in consumer.positions(topic, numbers).items():
            p = remaining[(topic, number)]
            p.next = max(p.next, offset)
            if p.next >= p.high:
                del remaining[(topic, number)]


__all__ = ["replay_timeline"]
