"""The background half of ``LockClient``: one thread that reads replies, renews, resends.

One ``LockIO`` serves every ``LockClient`` of a process with the same settings
(``_lock_shared``): requests carry their client's owner, replies are matched by request id.
Callers (any thread) register a pending request, produce it, and wait for its reply
(``wait``). Replies are read from the client's one partition of ``lock.replies`` by one
thread at a time, skipping other clients' replies by key without decoding them:

- **a caller that waits reads them itself** when no other thread is reading (leader /
  followers): its own reply then reaches it with no hand-off between threads, which is one
  thread wake-up less per request than a reader thread completing a future (each wake-up is
  a trip through the scheduler, milliseconds on a loaded machine). Callers that find a reader
  wait (followers); the reader completes their futures as their replies pass by, and hands
  the reading over to the next follower when its own reply came;
- **the IO thread** reads what is there (never blocking, so a caller can take over at once)
  every ``_POLL_S`` when nobody else reads: replies nobody waits for (renewals, expiry
  notices, replies that raced a timeout).

The IO thread also

- renews every held lease every ``ttl / 3`` (measured from the send time of the last request
  the service confirmed), and resends a renewal that got no answer after ``resend_s``;
- resends an acquire that got no answer (a reply lost when the service restarted between
  storing a grant and answering it), as the same request, which the service answers again;
- drops leases that are lost (expired notice, refused renewal, or ``ttl`` passed since the last
  confirmed request) from the renewal set.

A lease's deadline is always measured from when the client *sent* a request the service later
confirmed: the service started counting no earlier than it received it, so the client's view
of the deadline is never later than the service's.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from lakewarden.clients._lock_wire import lock_request, table_partition
from lakewarden.clock import SYSTEM_CLOCK, Clock
from lakewarden.events.codec import EventCodec, EventDecodeError
from lakewarden.events.consumer import EventConsumer
from lakewarden.extras import missing_extra
from lakewarden.table.coordinator import Lease

try:
    from confluent_kafka import KafkaError, Message, Producer
except ImportError as err:
    raise missing_extra("kafka", "Kafka support", err) from err

log = logging.getLogger(__name__)

Kind = Literal["acquire", "renew", "release"]

# How often the IO thread reads what is there and looks at renewals and resends; also the
# longest a reading caller blocks in one poll (it looks at its own future in between).
_POLL_S = 0.05


@dataclass(eq=False)
class LockLease(Lease):
    """A lease from timeline-lock. ``lost`` turns true when it was released, when the service
    said it expired or refused its renewal, or when ``ttl_s`` passed since the send time of
    the last request the service confirmed (its renewals failed for a whole ttl)."""

    request_id: str = ""
    owner: str = ""
    lost_reason: str | None = field(default=None, repr=False)
    confirmed_at: float = field(default=0.0, repr=False)  # monotonic send time, confirmed
    clock: Clock = field(default=SYSTEM_CLOCK, repr=False)  # the clock expires_at is on

    @property
    def lost(self) -> bool:
        return (
            self.released
            or self.lost_reason is not None
            or self.clock.monotonic() >= self.expires_at
        )


@dataclass(eq=False)
class Pending:
    """A request waiting for its reply."""

    kind: Kind
    table_id: str
    request_id: str
    ttl_ms: int
    sent_at: float  # first send: a lease granted on it is counted from here
    last_sent: float = 0.0  # last (re)send, for the resend timer
    future: Future[Any] = field(default_factory=Future)
    lease: LockLease | None = None
    queued: bool = False
    on_queued: Callable[[int], None] | None = None
    record: dict[str, Any] | None = None  # an acquire keeps its record, to resend it
    owner: str = ""  # the holder named in the request (default: the transport's owner)
    # Set when the future completes or when the caller is handed the reading (``wait``).
    wake: threading.Event = field(default_factory=threading.Event, repr=False)

    def __post_init__(self) -> None:
        self.future.add_done_callback(lambda _: self.wake.set())


class LockIO:
    """Owns the producer, the reply consumer and the IO thread that the ``LockClient``s of a
    process share (``client_id`` is the transport's: the key of its replies)."""

    def __init__(
        self,
        *,
        producer: Producer,
        consumer: EventConsumer,
        codec: EventCodec,
        requests_topic: str,
        request_partitions: int,
        reply_topic: str,
        reply_partition: int,
        client_id: str,
        owner: str,
        resend_s: float,
        clock: Clock = SYSTEM_CLOCK,
        poll_producer: bool = True,
    ) -> None:
        """``poll_producer``: the IO thread serves the producer's delivery reports (False: its
        owner polls it, on its own thread, as a producer shared with ``LockClient`` is)."""
        self.producer = producer
        self.poll_producer = poll_producer
        self.consumer = consumer
        self.codec = codec
        self.requests_topic = requests_topic
        self.request_partitions = request_partitions
        self.reply_topic = reply_topic
        self.reply_partition = reply_partition
        self.client_id = client_id
        self.owner = owner
        self.resend_s = resend_s
        self.clock = clock  # times leases, renewals and resends
        self.guard = threading.Lock()
        self.pending: dict[str, Pending] = {}
        self.leases: dict[str, LockLease] = {}  # by acquire request id
        self._renewing: dict[str, float] = {}  # acquire id -> send time of the renewal in flight
        self._key = client_id.encode()
        # Leader/followers (module doc): who reads replies now, and the callers waiting.
        self._reading = threading.Lock()  # guards the two below
        self._reader_busy = False
        self._followers: list[Pending] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lock-io-{client_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread, flush what is queued, close the consumer (idempotent)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(timeout=10)
        # A caller reading stops within one poll (it looks at _stop); then nobody reads again.
        deadline = time.monotonic() + 10
        while not self._lead(None) and time.monotonic() < deadline:
            time.sleep(0.01)
        self.producer.flush(5)
        self.consumer.close()

    # -- requests -------------------------------------------------------------------------

    def send(self, pending: Pending, **fields: Any) -> None:
        """Register ``pending`` and produce its request (fields: token, acquire_id)."""
        record = lock_request(
            table_id=pending.table_id,
            producer_id=self.client_id,
            request_id=pending.request_id,
            kind=pending.kind,
            owner=pending.owner or self.owner,
            ttl_ms=pending.ttl_ms,
            reply_topic=self.reply_topic,
            reply_partition=self.reply_partition,
            reply_key=self.client_id,
            **fields,
        )
        if pending.kind == "acquire":
            pending.record = record
        pending.last_sent = pending.sent_at
        with self.guard:
            self.pending[pending.request_id] = pending
        self.produce(pending.table_id, record)

    def send_untracked(self, kind: Kind, table_id: str, *, owner: str = "", **fields: Any) -> None:
        """Produce a request whose answer nobody waits for (release, withdraw): nothing is
        registered (no ``Pending``, whose future and event are for a caller who waits)."""
        record = lock_request(
            table_id=table_id,
            producer_id=self.client_id,
            request_id=uuid.uuid4().hex,
            kind=kind,
            owner=owner or self.owner,
            ttl_ms=0,
            reply_topic="",  # no answer wanted
            reply_partition=None,
            reply_key=None,
            **fields,
        )
        self.produce(table_id, record)

    def produce(self, table_id: str, record: dict[str, Any]) -> None:
        value = self.codec.encode("LockRequest", record)
        partition = table_partition(table_id, self.request_partitions)
        try:
            self.producer.produce(
                self.requests_topic,
                value,
                key=table_id.encode(),
                partition=partition,
                on_delivery=_on_delivery,
            )
        except BufferError:
            self.producer.poll(0.1)  # full local queue: serve delivery reports, try once more
            self.producer.produce(
                self.requests_topic, value, key=table_id.encode(), partition=partition
            )

    def wait(self, pending: Pending, timeout_s: float) -> Any:
        """The result of ``pending`` (a ``LockLease`` or the reply record), reading replies on
        this thread while no other thread does (leader/followers, module doc).

        Raises:
            TimeoutError: no reply within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while not pending.future.done():
            left = deadline - time.monotonic()
            if left <= 0:
                self._hand_on()  # it may have been handed the reading just now
                raise TimeoutError(f"no reply to {pending.kind} {pending.request_id}")
            if self._lead(pending):
                try:
                    self._read_until(pending, deadline)
                finally:
                    self._step_down()
            else:
                pending.wake.wait(left)  # completed, or handed the reading
                with self._reading:
                    if pending in self._followers:
                        self._followers.remove(pending)
        return pending.future.result(0)

    def _lead(self, pending: Pending | None) -> bool:
        """Take the reading when nobody reads (True); else, with ``pending``, queue up as a
        follower with its ``wake`` cleared (False)."""
        with self._reading:
            if not self._reader_busy and not (self._stop.is_set() and pending is not None):
                self._reader_busy = True
                return True
            if pending is not None:
                pending.wake.clear()
                if pending.future.done():  # completed before the clear: wake stays unset
                    pending.wake.set()
                elif pending not in self._followers:
                    self._followers.append(pending)
            return False

    def _step_down(self) -> None:
        """Give the reading up; the first follower still waiting is woken to take it."""
        with self._reading:
            self._reader_busy = False
        self._hand_on()

    def _hand_on(self) -> None:
        """When nobody reads, wake the first follower still waiting to take the reading."""
        with self._reading:
            if self._reader_busy:
                return
            while self._followers:
                follower = self._followers.pop(0)
                if not follower.future.done():
                    follower.wake.set()
                    break

    def _read_until(self, pending: Pending, deadline: float) -> None:
        """Read replies (completing whoever they are for) until ``pending`` is answered, the
        deadline passes or the transport stops."""
        while not pending.future.done() and not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            msg = self.consumer.poll_message(min(left, _POLL_S))
            while msg is not None:
                self._on_message(msg)
                msg = self.consumer.poll_message(0)

    def forget(self, request_id: str) -> LockLease | None:
        """Drop a pending request and, if it was granted meanwhile, its lease."""
        with self.guard:
            self.pending.pop(request_id, None)
            self._renewing.pop(request_id, None)
            return self.leases.pop(request_id, None)

    # -- the IO thread --------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                # What is there, without blocking: a caller that waits may take the reading.
                if self._lead(None):
                    try:
                        msg = self.consumer.poll_message(0)
                        while msg is not None:
                            self._on_message(msg)
                            msg = self.consumer.poll_message(0)
                    finally:
                        self._step_down()
                if self.poll_producer:
                    self.producer.poll(0)
                self._tick(self.clock.monotonic())
            except Exception:  # the thread must survive anything a reply or librdkafka throws
                log.exception("lock client IO loop error", extra={"client_id": self.client_id})
            self._stop.wait(_POLL_S)

    def _on_message(self, msg: Message) -> None:
        # Consumer errors never get here: EventConsumer logs them (librdkafka recovers).
        if msg.key() != self._key:
            return  # another client's reply: not even decoded
        try:
            name, record = self.codec.decode(msg.value() or b"")
        except EventDecodeError as err:
            log.warning("undecodable lock reply skipped: %s", err)
            return
        if name == "LockReply":
            self._on_reply(record)

    def _on_reply(self, reply: dict[str, Any]) -> None:
        request_id, status = reply["request_id"], reply["status"]
        # Decide under the guard; complete futures and call back outside it (a callback
        # may call into the client).
        done: Callable[[], None] | None = None
        with self.guard:
            pending = self.pending.get(request_id)
            if status == "expired":
                self._lost(request_id, reply.get("reason") or "expired")
            elif pending is None:
                pass  # answered already, or given up: a duplicate or late reply
            elif status == "queued" and pending.kind == "acquire":
                done = self._queued(pending, int(reply.get("queue_position") or 0))
            else:
                del self.pending[request_id]
                if pending.kind == "acquire":
                    done = self._acquired(pending, reply)
                elif pending.kind == "renew":
                    self._renewed(pending, reply)
                else:
                    done = partial(_resolve, pending.future, reply)
        if done is not None:
            done()

    def _queued(self, pending: Pending, position: int) -> Callable[[], None] | None:
        first = not pending.queued
        pending.queued = True
        if first and pending.on_queued is not None:
            return partial(pending.on_queued, position)
        return None

    def _acquired(self, pending: Pending, reply: dict[str, Any]) -> Callable[[], None]:
        if reply["status"] != "granted":
            return partial(_resolve, pending.future, reply)  # the caller raises the refusal
        ttl_s = pending.ttl_ms / 1000
        lease = LockLease(
            table_id=pending.table_id,
            token=int(reply["token"]),
            ttl_s=ttl_s,
            expires_at=pending.sent_at + ttl_s,
            request_id=pending.request_id,
            owner=pending.owner or self.owner,
            confirmed_at=pending.sent_at,
            clock=self.clock,
        )
        self.leases[pending.request_id] = lease
        return partial(_resolve, pending.future, lease)

    def _renewed(self, pending: Pending, reply: dict[str, Any]) -> None:
        lease = pending.lease
        if lease is None:
            return
        self._renewing.pop(lease.request_id, None)
        if reply["status"] == "granted":
            if pending.sent_at > lease.confirmed_at:
                lease.confirmed_at = pending.sent_at
                lease.expires_at = pending.sent_at + lease.ttl_s
        else:
            self._lost(lease.request_id, reply.get("reason") or "renewal refused")

    def _lost(self, acquire_id: str, reason: str) -> None:
        lease = self.leases.pop(acquire_id, None)
        self._renewing.pop(acquire_id, None)
        if lease is not None and lease.lost_reason is None:
            lease.lost_reason = reason
            log.warning(
                "lease lost: %s",
                reason,
                extra={"table": lease.table_id, "token": lease.token},
            )

    def _tick(self, now: float) -> None:
        renewals: list[LockLease] = []
        resends: list[Pending] = []
        with self.guard:
            for acquire_id, lease in list(self.leases.items()):
                if lease.lost:
                    self.leases.pop(acquire_id, None)
                    self._renewing.pop(acquire_id, None)
                    continue
                in_flight = self._renewing.get(acquire_id)
                due = lease.confirmed_at + lease.ttl_s / 3
                if now >= due and (in_flight is None or now - in_flight >= self.resend_s):
                    self._renewing[acquire_id] = now
                    renewals.append(lease)
            for pending in self.pending.values():
                wait = self.resend_s * (3 if pending.queued else 1)
                if pending.kind == "acquire" and now - pending.last_sent >= wait:
                    resends.append(pending)
        for lease in renewals:
            self._renew(lease, now)
        for pending in resends:
            if pending.record is not None:
                pending.last_sent = now  # same request id: the service answers it again
                self.produce(pending.table_id, pending.record)

    def _renew(self, lease: LockLease, now: float) -> None:
        pending = Pending(
            "renew",
            lease.table_id,
            uuid.uuid4().hex,
            int(lease.ttl_s * 1000),
            now,
            lease=lease,
            owner=lease.owner,
        )
        self.send(pending, token=lease.token)


def _resolve(future: Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _on_delivery(err: KafkaError | None, msg: Message) -> None:
    if err is not None:
        log.warning("lock request not delivered: %s", err, extra={"kafka_topic": msg.topic()})
