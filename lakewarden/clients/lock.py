"""LockClient: per-table leases from the timeline-lock service, usable from plain threads.

    client = LockClient(settings)
    with client.hold("orders", ttl_s=30, wait_s=60) as lease:
        ...                       # lease.token goes into every timeline entry appended
        if lease.lost: ...        # stop before appending anything
    client.close()

One client serves any number of threads and tables, and all clients of a process with the same
settings share one transport (``_lock_shared``): one confluent-kafka producer and one consumer
that reads a single partition of ``lock.replies`` (``crc32(transport id) % P``, no consumer
group); a caller waiting for a reply reads it itself when no other thread reads (else the
reader completes its future), and a background thread renews held leases (see
``_lock_io``). No network IO happens until the first ``acquire``; the last client closed
stops the transport.

Lost leases: the client marks a lease lost when the service says it expired, refuses its
renewal (stale token), or when ``ttl_s`` passed since the send time of the last request the
service confirmed. Holders check ``lease.lost`` before appending (``WriteTransaction`` does);
safety still never depends on it: the timeline's put-if-absent log and its state machine
judge a late append.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from lakewarden.clients import _lock_shared
from lakewarden.clients._lock_io import LockIO, LockLease, Pending
from lakewarden.clients._lock_wire import client_partition, ttl_ms
from lakewarden.clock import SYSTEM_CLOCK, Clock
from lakewarden.errors import NonRetryableError, RetryableError
from lakewarden.events.codec import default_codec
from lakewarden.events.consumer import EventConsumer, EventConsumerError
from lakewarden.events.latency import LOW_LATENCY_CONSUMER, LOW_LATENCY_PRODUCER
from lakewarden.events.producer import kafka_producer
from lakewarden.events.topics import LOCK_REPLIES, LOCK_REQUESTS
from lakewarden.extras import missing_extra
from lakewarden.settings import Settings
from lakewarden.table.coordinator import LockTimeoutError

try:
    from confluent_kafka import KafkaException, Producer, TopicPartition
except ImportError as err:
    raise missing_extra("kafka", "Kafka support", err) from err

log = logging.getLogger(__name__)


class LockRefusedError(NonRetryableError):
    """timeline-lock refused an acquire (``reason`` says why)."""

    def __init__(self, message: str, *, table: str, reason: str) -> None:
        super().__init__(message, table=table)
        self.reason = reason


class LockServiceUnavailableError(RetryableError):
    """The lock topics cannot be reached (broker down, or timeline-lock never started)."""


class LockClient:
    """Leases on table locks, from any thread. Thread-safe; close it when done.

    ``owner`` names the holder in the service's state and logs (default ``host:pid``);
    ``client_id`` names this client in logs (replies are keyed by the shared transport's id);
    ``resend_s`` is how long an unanswered acquire or renewal waits before it is sent again;
    ``clock`` times leases, renewals and resends (waits for a reply, ``wait_s``, are real time);
    ``producer``: a confluent-kafka producer the caller owns and polls (``poll`` serves the
    delivery reports of this client's requests too), which this client's transport sends its
    requests through instead of a producer of its own: a service that answers its callers
    after taking a table lock (cancel-manager) sends its answers and its lock requests on one
    connection and one librdkafka thread, not two, so its answer is not held up behind the
    lock's traffic on a second connection. Such a client has a transport of its own.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        owner: str | None = None,
        client_id: str | None = None,
        resend_s: float = 1.0,
        clock: Clock = SYSTEM_CLOCK,
        producer: Producer | None = None,
    ) -> None:
        self.settings = settings
        self.producer = producer
        self.client_id = client_id or f"lock-client-{uuid.uuid4().hex[:16]}"
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self.resend_s = resend_s
        self.clock = clock
        self._guard = threading.Lock()
        self._io: LockIO | None = None
        self._transport = ""  # the shared transport's key, known once started
        self._held: dict[str, LockLease] = {}  # by acquire request id: released by close()
        self._closed = False

    @contextmanager
    def hold(
        self,
        table_id: str,
        *,
        ttl_s: float = 30.0,
        wait_s: float = 30.0,
        on_queued: Callable[[int], None] | None = None,
        sent: Pending | None = None,
    ) -> Iterator[LockLease]:
        """Hold the lock of ``table_id`` for the ``with`` block; renewed in the background.
        ``sent``: the acquire ``send_acquire`` sent ahead for it (see ``acquire``).

        Raises:
            LockTimeoutError: not granted within ``wait_s``.
            LockRefusedError: the service refused the acquire.
            LockServiceUnavailableError: the lock topics cannot be reached.
        """
        lease = self.acquire(table_id, ttl_s=ttl_s, wait_s=wait_s, on_queued=on_queued, sent=sent)
        try:
            yield lease
        finally:
            self.release(lease)

    def acquire(
        self,
        table_id: str,
        *,
        ttl_s: float = 30.0,
        wait_s: float = 30.0,
        on_queued: Callable[[int], None] | None = None,
        sent: Pending | None = None,
    ) -> LockLease:
        """Wait (FIFO) for the lock of ``table_id``; ``on_queued(position)`` is called (on the
        thread reading replies, this one or another) once the service has queued the request
        behind others.

        Protocol: 1. register and send the acquire, unless ``sent`` is one ``send_acquire``
        sent ahead for this table and ttl (the caller worked while it travelled); 2. wait for
        the grant up to ``wait_s``; 3. on timeout, withdraw it (a grant that raced the timeout
        is released by the service).

        Raises:
            LockTimeoutError: not granted within ``wait_s``.
            LockRefusedError: the service refused the acquire.
            LockServiceUnavailableError: the lock topics cannot be reached.
            ValueError: ``sent`` is not an acquire of ``table_id`` with ``ttl_s``.
        """
        io = self._started()
        pending = sent
        if pending is None:
            pending = self.send_acquire(table_id, ttl_s=ttl_s, on_queued=on_queued)  # 1.
        elif (pending.kind, pending.table_id, pending.ttl_ms) != (
            "acquire",
            table_id,
            ttl_ms(ttl_s),
        ):
            raise ValueError(f"{pending} is not an acquire of {table_id} for {ttl_s:g} s")
        try:
            result = io.wait(pending, wait_s)  # 2.
        except TimeoutError:
            self.withdraw(pending)  # 3.
            raise LockTimeoutError(
                f"the lock of table {table_id} was not granted within {wait_s:g} s. "
                "Help: retry; a holder that needs long should renew (it does) or the "
                "timeline-lock service may be down (`lakewarden dev status`).",
                table=table_id,
            ) from None
        if isinstance(result, LockLease):
            with self._guard:
                self._held[result.request_id] = result
            return result
        reason = str(result.get("reason") or "no reason given")
        raise LockRefusedError(
            f"timeline-lock refused the lock of table {table_id}: {reason}",
            table=table_id,
            reason=reason,
        )

    def send_acquire(
        self,
        table_id: str,
        *,
        ttl_s: float = 30.0,
        on_queued: Callable[[int], None] | None = None,
    ) -> Pending:
        """Send an acquire of ``table_id`` now, to be waited for by ``acquire(..., sent=it)``
        or given up with ``withdraw``: a caller that knows it will need the lock sends the
        request before the work that precedes its ``acquire``, so that the request's round
        trip to the service overlaps that work. The lock is held only once ``acquire``
        returns; the lease counts from this send.

        Raises:
            LockServiceUnavailableError: the lock topics cannot be reached.
        """
        io = self._started()
        pending = Pending(
            "acquire",
            table_id,
            uuid.uuid4().hex,
            ttl_ms(ttl_s),
            self.clock.monotonic(),
            on_queued=on_queued,
            owner=self.owner,
        )
        io.send(pending)
        return pending

    def withdraw(self, pending: Pending) -> None:
        """Give up an acquire nobody will wait for any more (sent by ``send_acquire`` and
        not used, or timed out): the service drops it from the queue, or releases the lock if
        it granted it meanwhile. Never raises."""
        with self._guard:
            io = self._io
        if io is None:
            return
        io.forget(pending.request_id)
        try:
            io.send_untracked(
                "release", pending.table_id, owner=pending.owner, acquire_id=pending.request_id
            )
        except Exception:  # best effort: an unanswered acquire's lease ends by its ttl
            log.exception("withdrawing a lock acquire failed", extra={"table": pending.table_id})

    def release(self, lease: LockLease, *, wait_s: float | None = None) -> bool | None:
        """Give the lease back. Without ``wait_s`` it returns at once (None); with it, it
        waits for the answer: True when released, False when the lease was already lost.

        Raises:
            TimeoutError: ``wait_s`` passed without an answer.
        """
        lease.released = True
        with self._guard:
            self._held.pop(lease.request_id, None)
            io = self._io
        if io is None:
            return None
        io.forget(lease.request_id)  # no more renewals
        if wait_s is None:
            io.send_untracked("release", lease.table_id, owner=lease.owner, token=lease.token)
            return None
        pending = Pending(
            "release",
            lease.table_id,
            uuid.uuid4().hex,
            0,
            self.clock.monotonic(),
            owner=lease.owner,
        )
        io.send(pending, token=lease.token)
        reply = io.wait(pending, wait_s)
        return bool(reply["status"] == "granted")

    def close(self) -> None:
        """Release every lease this client holds; the last client of the process's transport
        flushes it and stops its IO thread (idempotent)."""
        with self._guard:
            io, self._io, self._closed = self._io, None, True
            held, self._held = list(self._held.values()), {}
        if io is None:
            return
        for lease in held:
            if lease.released or lease.lost:
                continue
            lease.released = True
            io.forget(lease.request_id)
            io.send_untracked("release", lease.table_id, owner=lease.owner, token=lease.token)
        _lock_shared.detach(self._transport, io)

    def connect(self) -> None:
        """Connect the transport now rather than at the first ``acquire`` (a service that will
        take locks pays the connection before its first caller waits on it). Idempotent.

        Raises:
            LockServiceUnavailableError: the lock topics cannot be reached.
        """
        self._started()

    def __enter__(self) -> LockClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _started(self) -> LockIO:
        with self._guard:
            if self._closed:
                raise NonRetryableError("this LockClient is closed")
            if self._io is None:
                self._transport = _lock_shared.transport_key(
                    self.settings, clock=self.clock, resend_s=self.resend_s
                )
                if self.producer is not None:  # its own transport: the caller's producer
                    self._transport += f"|producer:{id(self.producer)}"
                self._io = _lock_shared.attach(self._transport, self._connect)
            return self._io

    def _connect(self) -> LockIO:
        """Create the process's transport for these settings: the producer and the reply
        consumer, positioned at the partition's end.

        Raises:
            ConfigurationError: Kafka is not configured.
            LockServiceUnavailableError: the lock topics cannot be found.
        """
        kafka = self.settings.kafka
        timeout = kafka.request_timeout_s
        requests, replies = LOCK_REQUESTS.name(self.settings), LOCK_REPLIES.name(self.settings)
        transport_id = f"lock-client-{uuid.uuid4().hex[:16]}"
        # A waiting caller, not throughput, is what matters here: the low-latency producer.
        producer = self.producer or kafka_producer(
            self.settings, logger=log, **LOW_LATENCY_PRODUCER
        )
        counts = _partition_counts(producer, (requests, replies), timeout)
        reply_partition = client_partition(transport_id, counts[replies])
        # Replies meant for this client only: nothing is dead-lettered or committed.
        consumer = EventConsumer(
            self.settings,
            group_id=transport_id,  # never joined: the partition is assigned by hand
            auto_commit=False,
            dead_letters=False,
            auto_offset_reset="latest",
            enable_partition_eof=False,
            **LOW_LATENCY_CONSUMER,
            logger=log,
        )
        # Start at the current end, read before the first request is sent, so no reply to
        # this client can be produced before the consumer's position.
        try:
            _, high = consumer.watermarks(replies, reply_partition, timeout_s=timeout)
        except EventConsumerError as err:
            consumer.close()
            raise LockServiceUnavailableError(f"cannot read {replies}: {err}") from err
        consumer.assign([TopicPartition(replies, reply_partition, high)])
        return LockIO(
            producer=producer,
            consumer=consumer,
            codec=default_codec(),
            requests_topic=requests,
            request_partitions=counts[requests],
            reply_topic=replies,
            reply_partition=reply_partition,
            client_id=transport_id,
            owner=self.owner,
            resend_s=self.resend_s,
            clock=self.clock,
            poll_producer=self.producer is None,  # the caller polls its own
        )


def _partition_counts(
    producer: Producer, topics: tuple[str, ...], timeout: float
) -> dict[str, int]:
    """Partition count of each topic.

    Raises:
        LockServiceUnavailableError: the broker does not answer or a topic does not exist.
    """
    counts: dict[str, int] = {}
    for topic in topics:
        try:
            metadata = producer.list_topics(topic, timeout=timeout).topics.get(topic)
        except KafkaException as err:
            raise LockServiceUnavailableError(f"cannot reach the broker: {err}") from err
        if metadata is None or metadata.error is not None or not metadata.partitions:
            raise LockServiceUnavailableError(
                f"topic {topic} does not exist. Help: start timeline-lock (`lakewarden dev up`) "
                "or create the topics (lakewarden.events.ensure_topics)."
            )
        counts[topic] = len(metadata.partitions)
    return counts


__all__ = [
    "LockClient",
    "LockLease",
    "Pending",
    "LockRefusedError",
    "LockServiceUnavailableError",
    "LockTimeoutError",
]
