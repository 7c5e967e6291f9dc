"""heartbeat-monitor's Kafka loop: one consumer, one producer, one thread.

Why not a faust agent: heartbeats are the one stream that is both
high-rate and trivial to handle (10,000 instants beating every second is 10,000 messages a
second of ~100 bytes). faust spends several times more CPU on a message before an agent sees
it than librdkafka's batched consume, the decoding and the tracker spend together
(``python -m benchmarks heartbeat`` runs a no-op faust agent beside this loop). So the loop is
a plain loop over ``EventConsumer`` batches (raw messages: the ``Monitor`` decodes and
dead-letters), and it keeps what every service loop has: a consumer group whose members
split the partitions (``range`` assignment keeps partition P of ``heartbeats`` and of
``timeline`` together), state recovered from a compacted changelog on assignment,
at-least-once processing (offsets are committed only after everything the processed messages
caused was flushed), the health and metrics endpoint and logging of
``lakewarden_services._common``.

The loop, each turn:
1. every ``tick_s``: send a tick to every partition of ``heartbeats``;
2. consume a batch; hand each message to the ``Monitor`` (heartbeats or timeline);
3. carry out its effects: publish the expiries and wait for the broker's acknowledgements,
   then write the liveness changelog records and the dead letters;
4. store the offsets of the batch; about once a second, flush the producer and commit them.

On assignment the liveness records of the new partitions are read from the changelog before
the first message of theirs is processed; on revocation the offsets are committed first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Final

from confluent_kafka import (
    TIMESTAMP_LOG_APPEND_TIME,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from lakewarden.clients.liveness import SERVICE
from lakewarden.events import EventCodec, EventConsumerError
from lakewarden.settings import Settings
from lakewarden_services._common.changelog import recover_changelog
from lakewarden_services._common.dlq import DEAD_LETTERS
from lakewarden_services._common.loop_service import LoopState, loop_producer
from lakewarden_services._common.settings import Group
from lakewarden_services.heartbeat_monitor.monitor import Consumed, Effects, Monitor

log = logging.getLogger(__name__)

_BATCH: Final = 5_000
_COMMIT_EVERY_S: Final = 1.0
_MAX_WAIT_S: Final = 0.1


class Topics:
    """The names this worker uses (under the settings' prefix)."""

    def __init__(
        self,
        *,
        heartbeats: str,
        timeline: str,
        expired: str,
        dlq: str,
        changelog: str,
        partitions: int,
        expired_partitions: int,
    ) -> None:
        self.heartbeats = heartbeats
        self.timeline = timeline
        self.expired = expired
        self.dlq = dlq
        self.changelog = changelog
        self.partitions = partitions
        self.expired_partitions = expired_partitions


class Worker(LoopState):
    """Runs the monitor until ``stop`` is set (see the module doc). ``on_ready`` is called
    once, after the first assignment (and its recovery) completed."""

    def __init__(
        self,
        settings: Settings,
        monitor: Monitor,
        topics: Topics,
        *,
        group: Group,
        tick_s: float,
        on_ready: Callable[[], None] = lambda: None,
        codec: EventCodec | None = None,
    ) -> None:
        super().__init__(settings, group, codec=codec, on_ready=on_ready)
        self.monitor = monitor
        self.topics = topics
        self.tick_s = tick_s
        # Offsets by hand (step 4); messages raw: the Monitor decodes and dead-letters them
        # as effects, written in order with the changelog (step 3).
        self.consumer = self.group_consumer(
            log,
            # A new group starts now: old beats say nothing a tolerance window will not.
            auto_offset_reset="latest",
            partition_assignment_strategy="range",
            session_timeout_ms=10_000,
        )
        self.producer = loop_producer(settings, linger_ms=5, logger=log)
        self._failed: list[str] = []
        self._owned: set[int] = set()  # the heartbeats partitions assigned and not yet given up

    def run(self, stop: threading.Event) -> None:
        """The loop (see the module doc) until ``stop`` is set; then commit and close.

        Raises:
            EventConsumerError: the consumer failed fatally.
            KafkaException: the producer failed (an expiry could not be delivered).
        """
        self.consumer.subscribe(
            [self.topics.heartbeats, self.topics.timeline],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        next_tick = time.monotonic()
        last_commit = time.monotonic()
        try:
            while not stop.is_set():
                now = time.monotonic()
                if now >= next_tick:
                    self._send_ticks()  # 1.
                    next_tick = now + self.tick_s
                wait = min(max(next_tick - time.monotonic(), 0.0), _MAX_WAIT_S)
                # A batch, not poll(): heartbeats are high-rate and ticks bound the wait.
                batch = self.consumer.consume(_BATCH, wait)
                if batch:
                    self._process(batch, stop)  # 2. - 4.
                if time.monotonic() - last_commit >= _COMMIT_EVERY_S:
                    self._commit()
                    last_commit = time.monotonic()
        finally:
            self._close()

    # -- one batch -------------------------------------------------------------------------

    def _process(self, batch: list[Message], stop: threading.Event) -> None:
        last: dict[tuple[str, int], int] = {}
        heartbeats, timeline = self.topics.heartbeats, self.topics.timeline
        for msg in batch:  # consumer errors were handled by the consumer
            topic, partition, offset = str(msg.topic()), int(msg.partition() or 0), msg.offset()
            kind, timestamp = msg.timestamp()
            consumed = Consumed(
                topic=topic,
                partition=partition,
                offset=int(offset or 0),
                key=msg.key(),
                value=msg.value() or b"",
                timestamp_ms=int(timestamp),
                log_append_time=kind == TIMESTAMP_LOG_APPEND_TIME,
            )
            if topic == heartbeats:
                self.monitor.on_heartbeat(consumed)
            elif topic == timeline:
                self.monitor.on_timeline(consumed)
            last[(topic, partition)] = consumed.offset
        effects = self.monitor.take_effects()
        if effects:
            self._carry_out(effects, stop)  # 3.
        self._store(last)  # 4.

    def _carry_out(self, effects: Effects, stop: threading.Event) -> None:
        if effects.expired:
            for expiry, record in effects.expired:
                self._produce(
                    self.topics.expired,
                    self.codec.encode("HeartbeatExpired", record),
                    key=expiry.table_id.encode(),
                    # The partition of the heartbeats it expires: a consumer co-partitioned
                    # with heartbeats and timeline sees a table's expiries beside its events.
                    partition=expiry.partition % self.topics.expired_partitions,
                    on_delivery=self._on_delivery,
                )
            self._flush_until_delivered(stop)
        for write in effects.changelog:
            self._produce(
                self.topics.changelog,
                write.value,
                key=write.key,
                partition=write.partition,
                on_delivery=self._on_delivery,
            )
        for record in effects.dead_letters:
            DEAD_LETTERS.labels(SERVICE, record["reason"]).inc()
            self._produce(
                self.topics.dlq,
                self.codec.encode("DeadLetter", record),
                key=record["key"],
                on_delivery=self._on_delivery,
            )
        self.producer.poll(0)

    def _produce(self, topic: str, value: bytes | None, **kwargs: Any) -> None:
        """Queue one message; a full local queue is drained (delivery reports served) first."""
        while True:
            try:
                self.producer.produce(topic, value, **kwargs)
                return
            except BufferError:
                self.producer.poll(0.1)

    def _flush_until_delivered(self, stop: threading.Event) -> None:
        """Wait until every queued message is acknowledged; a broker that is away is waited
        for (librdkafka retries), because nothing may be recorded before its expiry is out."""
        while self.producer.flush(1.0) and not stop.is_set():
            log.warning("waiting for the broker to acknowledge expiries")
        if self._failed:
            failed, self._failed = self._failed, []
            raise KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT, "; ".join(failed[:5])))

    def _store(self, last: dict[tuple[str, int], int]) -> None:
        # A partition revoked meanwhile is skipped: its next owner processes the batch again.
        self.consumer.store_offsets([TopicPartition(t, p, o + 1) for (t, p), o in last.items()])

    def _commit(self) -> None:
        """Flush the producer (expiries, changelog, dead letters), then commit stored offsets."""
        remaining = self.producer.flush(self.settings.kafka.request_timeout_s)
        if remaining or self._failed:
            log.warning("not committing: %d messages undelivered", remaining)
            self._failed = []
            return
        try:
            self.consumer.commit()
        except EventConsumerError as err:
            log.warning("offset commit failed: %s", err)

    def _send_ticks(self) -> None:
        for partition in range(self.topics.partitions):
            self._produce(
                self.topics.heartbeats,
                self.codec.encode("Heartbeat", self.monitor.tick_record()),
                key=b"",
                partition=partition,
            )
        self.producer.poll(0)

    # -- rebalances ------------------------------------------------------------------------

    def _on_assign(self, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        mine = sorted(tp.partition for tp in partitions if tp.topic == self.topics.heartbeats)
        records = self._recover(mine)
        self.monitor.assigned(mine, records)
        self._owned.update(mine)
        log.info(
            "partitions assigned",
            extra={"partitions": mine, "records": len(records), "service": "heartbeat-monitor"},
        )
        self.ready()

    def _on_revoke(self, partitions: list[TopicPartition]) -> None:
        self.membership.revoked()
        self._commit()
        self._forget(partitions)

    def _on_lost(self, partitions: list[TopicPartition]) -> None:
        self.membership.lost()
        self._forget(partitions)

    def _forget(self, partitions: Iterable[TopicPartition]) -> None:
        mine = sorted(tp.partition for tp in partitions if tp.topic == self.topics.heartbeats)
        self.monitor.revoked(mine)
        self._owned.difference_update(mine)

    def _recover(self, partitions: list[int]) -> dict[bytes, bytes]:
        """The latest record of every key of the changelog ``partitions`` (deletes applied).

        Raises:
            EventConsumerError: the changelog could not be read.
        """
        return recover_changelog(
            self.settings,
            group_id=self.group_id,
            topic=self.topics.changelog,
            partitions=partitions,
        )

    # -- delivery and errors ---------------------------------------------------------------

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._failed.append(f"{msg.topic()}: {err}")
            log.error("delivery failed", extra={"kafka_topic": msg.topic(), "error": str(err)})

    def _close(self) -> None:
        """Commit, close the clients, and give up every partition still owned: the monitor
        and its tracker outlive this worker (``app``), and a consumer that failed fatally is
        closed without a revocation, so a loop built again after it (``RebuildingLoop``)
        would otherwise start with the dead loop's instants and records."""
        try:
            self._commit()
            self.consumer.close()
        finally:
            self.producer.flush(self.settings.kafka.request_timeout_s)
            self.monitor.revoked(sorted(self._owned))
            self._owned.clear()
