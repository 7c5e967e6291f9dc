"""The raw half of ``EventConsumer``: one librdkafka consumer made from ``Settings``, placed
by group subscription or by hand, read message by message or in batches, offsets stored and
committed as told. ``EventConsumer`` adds decoding and dead-lettering on top; nothing else in
lakewarden creates a confluent-kafka consumer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from lakewarden.errors import RetryableError
from lakewarden.events.kafka_errors import AuthWatch, is_authentication_failure
from lakewarden.events.topics import TopicSpec
from lakewarden.extras import missing_extra
from lakewarden.settings import Settings

try:
    from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
except ImportError as err:
    raise missing_extra("kafka", "Kafka support", err) from err

log = logging.getLogger("lakewarden.events.consumer")

Partitions = list[TopicPartition]
RebalanceCallback = Callable[[Partitions], None]

# A topic created a moment ago may have no partition leader yet: worth asking again.
_NO_LEADER_YET = (
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
)


# Kafka's ListOffsets timestamps for "the end" and "the start" of a partition.
LATEST = -1
EARLIEST = -2


class EventConsumerError(RetryableError):
    """The broker could not be read (unreachable, a metadata, offsets or commit request
    failed) or the consumer failed fatally."""


class KafkaReader:
    """Reads Kafka messages as they are (see ``EventConsumer`` for the options)."""

    def __init__(
        self,
        settings: Settings,
        *,
        group_id: str,
        consumer_id: str,
        topics: Iterable[TopicSpec | str],
        auto_commit: bool,
        config: dict[str, Any],
    ) -> None:
        self.settings = settings
        self.group_id = group_id
        self.consumer_id = consumer_id
        self.topics = [t if isinstance(t, str) else t.name(settings) for t in topics]
        self.auto_commit = auto_commit
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

    def offset_at(self, topic: str, partition: int, epoch_ms: int, *, timeout_s: float) -> int:
        """The first offset of the partition with a timestamp at or after ``epoch_ms``; -1
        when no message is that recent.

        Raises:
            EventConsumerError: the broker did not answer within ``timeout_s``.
        """
        try:
            (found,) = self._client().offsets_for_times(
                [TopicPartition(topic, partition, epoch_ms)], timeout=timeout_s
            )
        except KafkaException as err:
            raise EventConsumerError(
                f"cannot look up offsets by time in {topic} [{partition}]: {err}"
            ) from err
        return int(found.offset)

    def partitions_of(self, topics: Iterable[str], *, timeout_s: float) -> dict[str, list[int]]:
        """The partition ids of each of ``topics`` that exists, from one metadata request
        (``partitions`` asks once per topic).

        Raises:
            EventConsumerError: the broker did not answer within ``timeout_s``.
        """
        try:
            metadata = self._client().list_topics(timeout=timeout_s).topics
        except KafkaException as err:
            raise EventConsumerError(f"cannot read the topics' metadata: {err}") from err
        found = {}
        for topic in topics:
            meta = metadata.get(topic)
            if meta is not None and meta.error is None and meta.partitions:
                found[topic] = sorted(meta.partitions)
        return found

    def offsets_for(
        self, partitions: Sequence[tuple[str, int]], epoch_ms: int, *, timeout_s: float
    ) -> list[int] | None:
        """For each ``(topic, partition)``, the first offset with a timestamp at or after
        ``epoch_ms`` (-1: none that recent), in one request per broker. ``epoch_ms`` may be
        ``LATEST`` (the end offset: the high watermark, or the last stable offset when a
        transaction is open) or ``EARLIEST`` (the low watermark). None when any partition
        answered with an error (a new topic's partition without a leader yet): ask per
        partition then (``watermarks``, ``offset_at``), which retry.

        Raises:
            EventConsumerError: the broker did not answer within ``timeout_s``.
        """
        if not partitions:
            return []
        try:
            found = self._client().offsets_for_times(
                [TopicPartition(t, p, epoch_ms) for t, p in partitions], timeout=timeout_s
            )
        except KafkaException as err:
            if _retriable(err):
                return None
            raise EventConsumerError(f"cannot look up offsets by time: {err}") from err
        if any(tp.error is not None for tp in found):
            return None
        by_partition = {(tp.topic, tp.partition): int(tp.offset) for tp in found}
        if len(by_partition) != len(partitions):
            return None
        return [by_partition[where] for where in partitions]

    def positions(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        """The next offset to read of each assigned partition (negative: nothing read yet)."""
        tps = [TopicPartition(topic, p) for p in partitions]
        return {tp.partition: int(tp.offset) for tp in self._client().position(tps)}

    # -- reading ---------------------------------------------------------------------------

    def poll_message(self, timeout_s: float) -> Message | None:
        """The next message as it is (not decoded), or ``None`` after ``timeout_s``. Returns
        as soon as one is there. Consumer errors are logged (librdkafka recovers from them),
        not returned.

        Raises:
            KafkaAuthenticationError: the broker refused the credentials.
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

    def consume_unchecked(self, max_messages: int, timeout_s: float) -> list[Message]:
        """``consume`` without its per-message error filter, for a bulk reader's hot loop
        (a million-message read would walk every batch twice): the caller hands each
        message whose ``error()`` is not None to ``on_error``.

        Raises:
            EventConsumerError: the consumer failed fatally.
        """
        return self._started().consume(num_messages=max_messages, timeout=timeout_s)

    def on_error(self, error: KafkaError) -> None:
        """What ``consume`` does with a message's error: a fatal one or an authentication
        failure raises, any other is logged (librdkafka recovers from it).

        Raises:
            EventConsumerError: the consumer failed fatally.
        """
        self._on_error(error)

    def pause(self, partitions: Sequence[TopicPartition]) -> None:
        """Stop fetching ``partitions`` until ``resume`` (a reader whose work is backed up;
        a partition assigned again starts fetching)."""
        if self._consumer is not None and partitions:
            self._consumer.pause(list(partitions))

    def resume(self, partitions: Sequence[TopicPartition]) -> None:
        """Fetch ``partitions`` again after ``pause``."""
        if self._consumer is not None and partitions:
            self._consumer.resume(list(partitions))

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
        """Commit synchronously: ``offsets`` if given, else the stored offsets.

        Raises:
            EventConsumerError: the commit failed.
        """
        if self._consumer is not None:
            self._commit(offsets)

    def commit_async(self, offsets: Sequence[TopicPartition]) -> None:
        """Send a commit of ``offsets`` without waiting for the broker's answer (a loop that
        must not stall on the group coordinator; a commit that fails is superseded by the
        next one, and at worst some messages are read again)."""
        if self._consumer is None or not offsets:
            return
        try:
            self._consumer.commit(offsets=list(offsets), asynchronous=True)
        except KafkaException as err:
            log.warning("offset commit not sent: %s", err)

    def close(self) -> None:
        """Leave the group (with ``auto_commit``, stored offsets are committed)."""
        consumer, self._consumer = self._consumer, None
        self._placed = False
        if consumer is not None:
            consumer.close()

    # -- internals -------------------------------------------------------------------------

    def _client(self) -> Consumer:
        if self._consumer is None:
            config = self.settings.kafka.librdkafka_config(group_id=self.group_id, **self._config)
            # Client-level errors reach ``_on_error`` from poll/consume (as they did as error
            # messages); a refused login among them is raised as KafkaAuthenticationError.
            config["error_cb"] = self._on_error
            self._consumer = Consumer(config)
        return self._consumer

    def _started(self) -> Consumer:
        """The client, subscribed to ``topics`` if it was neither subscribed nor assigned."""
        consumer = self._client()
        if not self._placed and self.topics:
            self.subscribe()
        return consumer

    def _store(self, msg: Message) -> None:
        """Store the offset past ``msg`` (skipped, like ``store_offsets``, when revoked)."""
        assert self._consumer is not None, "created before anything is read"
        try:
            self._consumer.store_offsets(message=msg)
        except KafkaException as err:
            log.info("offset not stored: %s", err, extra=where(msg))

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
        if is_authentication_failure(error):
            raise AuthWatch(self.settings.kafka).refusal(error)
        # A fatal error reaches the error callback as code _FATAL, whose ``fatal()`` flag is not
        # always set (seen: a static member fenced after a broker restart): both mean the
        # consumer is unusable for good.
        if error.fatal() or error.code() == KafkaError._FATAL:
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


def where(msg: Message) -> dict[str, Any]:
    return {
        "kafka_topic": msg.topic(),
        "kafka_partition": msg.partition(),
        "kafka_offset": msg.offset(),
    }
