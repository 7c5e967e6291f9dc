"""timeline-lock's Kafka loop: one consumer, one producer, one thread.

Why a plain confluent-kafka loop rather than a faust agent: a lock client waits for every
answer, so the service's own latency is the product. Through faust, a request crossed
aiokafka's consumer thread, the agent's queue and aiokafka's producer, each hop adding its
own delay on top of the broker's, so an acquire+release cost several raw Kafka round trips
instead of about one. Here the
request is read by librdkafka, applied (``RequestHandler``) and its reply handed back to
librdkafka on the same thread, with nothing in between.

It keeps what faust gave: a consumer group whose members split the partitions of
``lock.requests`` (static membership with ``LAKEWARDEN_INSTANCE_ID``), the locks in a
compacted changelog topic partitioned like the requests and read back on assignment before
any request of those partitions is handled, and at-least-once processing with exactly-once
effect (offsets are committed only after the changelog writes of what they cover were
acknowledged, ``offsets.CommitTracker``, and ``state.apply`` skips requests at or below a
lock's applied offset).

The loop, each turn:
1. every ``EXPIRY_TICK_S``: the ``ExpiryScanner`` sends ``expire`` requests for overdue leases;
2. wait for a request (returns as soon as one arrives), take what else is already there;
3. for each: the handler's replies and dead letters are produced at once; the tables it
   changed are noted (``deferred.DeferredChangelog``);
4. every ``changelog_interval_s``: one changelog record per table changed since its last one
   (its lock as it stands: the compacted topic keeps only the last one anyway), acknowledging
   every request it covers. Off the request path: a reply never waits behind it, and a busy
   table costs a few records a second instead of one per batch (``deferred`` says why this
   keeps the exactly-once effect);
5. every ``commit_interval_s``: commit (asynchronously) the offsets whose durable writes the
   broker acknowledged; the loop never waits for the broker.

On assignment the changelog of the new partitions is read to its end first; on revocation
the changed locks are written, the offsets committed and the revoked partitions' locks
dropped.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, Final

from confluent_kafka import KafkaError, Message, TopicPartition

from lakewarden.clients import table_partition
from lakewarden.events import EventCodec, EventConsumerError
from lakewarden.settings import Settings
from lakewarden_services._common.changelog import recover_changelog
from lakewarden_services._common.loop_service import LoopState, loop_producer
from lakewarden_services._common.settings import Group
from lakewarden_services.timeline_lock import metrics
from lakewarden_services.timeline_lock.deferred import Covered, DeferredChangelog
from lakewarden_services.timeline_lock.handler import (
    SERVICE,
    Consumed,
    Effects,
    ExpiryScanner,
    RequestHandler,
    reply_value,
    wall_clock_ms,
)
from lakewarden_services.timeline_lock.offsets import CommitTracker

log = logging.getLogger(__name__)

# Expiry is seen at most this late (plus a Kafka round trip); the goal is within ttl + 1 s.
EXPIRY_TICK_S: Final = 0.25
# How often the changed locks are written to the changelog (``deferred``).
CHANGELOG_INTERVAL_S: Final = 0.25
_DRAIN: Final = 500  # requests taken at once when several are already there


class Topics:
    """The names this worker uses (under the settings' prefix) and the partition counts."""

    def __init__(
        self,
        *,
        requests: str,
        replies: str,
        changelog: str,
        dlq: str,
        partitions: int,
        reply_partitions: int,
    ) -> None:
        self.requests = requests
        self.replies = replies
        self.changelog = changelog
        self.dlq = dlq
        self.partitions = partitions
        self.reply_partitions = reply_partitions


def changelog_key(table_id: str) -> bytes:
    """A lock's changelog key: the table id as a JSON string (faust's format, so a changelog
    written by the faust version of this service is read back as it is)."""
    return json.dumps(table_id).encode()


class Worker(LoopState):
    """Runs timeline-lock until ``stop`` is set (see the module doc). ``on_ready`` is called
    once, after the first assignment (and its recovery) completed. ``changelog_interval_s``:
    how long a changed lock may wait for its changelog record (longer: fewer records, more
    requests applied again after a crash)."""

    def __init__(
        self,
        settings: Settings,
        topics: Topics,
        *,
        group: Group,
        commit_interval_s: float,
        changelog_interval_s: float = CHANGELOG_INTERVAL_S,
        on_ready: Callable[[], None] = lambda: None,
        codec: EventCodec | None = None,
    ) -> None:
        super().__init__(settings, group, codec=codec, on_ready=on_ready)
        self.topics = topics
        self.commit_interval_s = commit_interval_s
        self.changelog_interval_s = changelog_interval_s
        self.assigned_at_ms = wall_clock_ms()
        self.locks: dict[str, Any] = {}  # table id -> lock_to_json value, owned partitions only
        self.handler = RequestHandler(
            table=self.locks,
            reply_topic=topics.replies,
            partitions=lambda: topics.partitions,
            reply_partitions=lambda: topics.reply_partitions,
            consumer_group=group.id,
            codec=self.codec,
        )
        self.scanner = ExpiryScanner(
            table=self.locks,
            send_request=self._send_request,
            owned_since=lambda: self.assigned_at_ms,
            producer_id=SERVICE,
            expirable=self._expirable,
        )
        # A new group applies the whole request log (from the earliest offset).
        self.consumer = self.group_consumer(log)
        # A client waits for each reply: no linger.
        self.producer = loop_producer(settings, linger_ms=0, logger=log)
        self.commits = CommitTracker()
        self.changelog = DeferredChangelog(self._write_record, self.commits.delivered)

    def run(self, stop: threading.Event) -> None:
        """The loop (see the module doc) until ``stop`` is set; then commit and close.

        Raises:
            EventConsumerError: the consumer failed fatally or the changelog could not be read.
        """
        self.consumer.subscribe(
            [self.topics.requests],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        next_scan = time.monotonic() + EXPIRY_TICK_S
        last_commit = last_changelog = time.monotonic()
        try:
            while not stop.is_set():
                now = time.monotonic()
                if now >= next_scan:
                    if self.membership.ready and not self.membership.rebalancing:
                        self.scanner.tick()  # 1.
                    next_scan = now + EXPIRY_TICK_S
                msg = self.consumer.poll_message(max(0.0, min(next_scan - now, 0.1)))  # 2.
                if msg is not None:
                    for each in [msg, *self.consumer.consume(_DRAIN, 0)]:
                        self._process(each)  # 3.
                self.producer.poll(0)  # delivery reports: DeferredChangelog, CommitTracker
                if time.monotonic() - last_changelog >= self.changelog_interval_s:
                    self._store()  # 4.
                    last_changelog = time.monotonic()
                if time.monotonic() - last_commit >= self.commit_interval_s:
                    self._commit(wait=False)  # 5.
                    last_commit = time.monotonic()
        finally:
            self._close()

    # -- one request -----------------------------------------------------------------------

    def _process(self, msg: Message) -> None:
        _, timestamp = msg.timestamp()
        consumed = Consumed(
            topic=str(msg.topic()),
            partition=int(msg.partition() or 0),
            offset=int(msg.offset() or 0),
            key=msg.key(),
            value=msg.value() or b"",
            timestamp_ms=max(0, int(timestamp)),
        )
        effects = self.handler.handle(consumed, account=False)
        self.commits.processed(
            consumed.partition,
            consumed.offset,
            durable_writes=len(effects.changelog) + len(effects.dead_letters),
        )
        self._carry_out(effects, consumed.partition, consumed.offset)
        self.handler.account(effects)  # after the replies: nobody waits for the metrics

    def _carry_out(self, effects: Effects, partition: int, offset: int) -> None:
        """Replies and dead letters now; the changelog writes are noted for later (4.)."""
        for table_id, reply in effects.replies:
            value = reply_value(reply, table_id=table_id, codec=self.codec)
            key = (reply.route.key or table_id).encode()
            if reply.route.partition is None:
                self._produce(self.topics.replies, value, key=key)
            else:
                self._produce(self.topics.replies, value, key=key, partition=reply.route.partition)
        for table_id in effects.changelog:
            if self.changelog.changed(table_id, partition, offset):  # rarely: not per request
                metrics.CHANGELOG_PENDING.set(self.changelog.pending())
        durable = partial(self._on_durable, [(partition, offset)])
        for record in effects.dead_letters:
            value = self.codec.encode("DeadLetter", record)
            key = record["envelope"]["table_id"].encode()
            self._produce(self.topics.dlq, value, key=key, on_delivery=durable)

    def _store(self) -> None:
        """One changelog record per table changed since its last one (4.)."""
        if self.changelog:
            metrics.CHANGELOG_WRITES.inc(self.changelog.flush())
        metrics.CHANGELOG_PENDING.set(self.changelog.pending())

    def _write_record(self, table_id: str, covered: Covered) -> bool:
        """The table's lock now, as its changelog record; its delivery acknowledges the
        changelog write of every request in ``covered``. False: no longer owned."""
        lock = self.locks.get(table_id)
        if lock is None:  # revoked meanwhile: its next owner reads the requests again
            return False
        self._produce(
            self.topics.changelog,
            json.dumps(lock).encode(),
            key=changelog_key(table_id),
            partition=covered[0][0],
            on_delivery=partial(self._on_changelog_delivery, table_id, covered),
        )
        return True

    def _expirable(self, table_id: str) -> bool:
        """May the scanner expire the table's lease now? Only once its deadline is durable
        (``deferred``, point 3); a change still waiting for its record is written now."""
        if self.changelog.durable(table_id):
            return True
        metrics.CHANGELOG_WRITES.inc(self.changelog.flush([table_id]))
        return False

    def _send_request(self, table_id: str, record: dict[str, Any]) -> None:
        self._produce(
            self.topics.requests,
            self.codec.encode("LockRequest", record),
            key=table_id.encode(),
            partition=table_partition(table_id, self.topics.partitions),
        )
        self.producer.poll(0)

    def _produce(
        self,
        topic: str,
        value: bytes,
        *,
        on_delivery: Callable[[KafkaError | None, Message], None] | None = None,
        **kwargs: Any,
    ) -> None:
        callback = on_delivery or _log_failure
        try:
            self.producer.produce(topic, value, on_delivery=callback, **kwargs)
        except BufferError:
            self.producer.flush(self.settings.kafka.request_timeout_s)  # full: wait, once
            self.producer.produce(topic, value, on_delivery=callback, **kwargs)

    def _commit(self, *, wait: bool) -> None:
        """Commit what ``CommitTracker`` says is covered by acknowledged writes. ``wait``
        (revocation, shutdown): flush the producer first and commit synchronously."""
        if wait:
            self.producer.flush(self.settings.kafka.request_timeout_s)
            self.producer.poll(0)
        topic = self.topics.requests
        offsets = [TopicPartition(topic, p, o) for p, o in self.commits.to_commit().items()]
        if not wait:
            self.consumer.commit_async(offsets)
            return
        try:
            self.consumer.commit(offsets)
        except EventConsumerError as err:
            log.warning("offset commit failed: %s", err)

    # -- rebalances ------------------------------------------------------------------------

    def _on_assign(self, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        mine = sorted(tp.partition for tp in partitions if tp.topic == self.topics.requests)
        recovered = self._recover(mine)
        self.locks.update(recovered)
        self.assigned_at_ms = wall_clock_ms()
        log.info(
            "partitions assigned",
            extra={"partitions": mine, "locks": len(recovered), "service": SERVICE},
        )
        self.ready()

    def _on_revoke(self, partitions: list[TopicPartition]) -> None:
        self.membership.revoked()
        self._store()  # the next owner then starts from these locks, not from re-applying
        self._commit(wait=True)
        self._forget(partitions)

    def _on_lost(self, partitions: list[TopicPartition]) -> None:
        self.membership.lost()
        self._forget(partitions)

    def _forget(self, partitions: Iterable[TopicPartition]) -> None:
        gone = {tp.partition for tp in partitions if tp.topic == self.topics.requests}
        self.commits.forget(gone)
        tables = [t for t in self.locks if table_partition(t, self.topics.partitions) in gone]
        self.changelog.forget(tables)
        for table_id in tables:
            del self.locks[table_id]

    def _recover(self, partitions: list[int]) -> dict[str, Any]:
        """The latest lock of every table in the changelog ``partitions``.

        Raises:
            EventConsumerError: the changelog could not be read to its end in time.
        """
        raw = recover_changelog(
            self.settings,
            group_id=self.group_id,
            topic=self.topics.changelog,
            partitions=partitions,
        )
        locks: dict[str, Any] = {}
        for key, value in raw.items():
            try:
                locks[str(json.loads(key))] = json.loads(value)
            except ValueError as err:  # not ours: say so, keep the rest
                log.error("unreadable changelog record skipped: %s", err, extra={"key": key[:200]})
        return locks

    # -- delivery and closing --------------------------------------------------------------

    def _on_durable(self, covered: Covered, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            for partition, offset in covered:
                self.commits.delivered(partition, offset)
        else:  # never acknowledged: the commit of its partition stays before it
            _log_failure(err, msg)

    def _on_changelog_delivery(
        self, table_id: str, covered: Covered, err: KafkaError | None, msg: Message
    ) -> None:
        if err is not None:  # written again by the next flush (``deferred``)
            _log_failure(err, msg)
        self.changelog.on_delivery(table_id, covered, ok=err is None)
        metrics.CHANGELOG_PENDING.set(self.changelog.pending())

    def _close(self) -> None:
        try:
            self._store()
            self._commit(wait=True)
            self.consumer.close()
        finally:
            self.producer.flush(self.settings.kafka.request_timeout_s)


def _log_failure(err: KafkaError | None, msg: Message) -> None:
    if err is not None:
        log.error("delivery failed", extra={"kafka_topic": msg.topic(), "error": str(err)})
