"""What timeline-lock does with each request, apart from Kafka (tests drive it directly).

``RequestHandler.handle`` takes one message of ``lock.requests`` and returns its ``Effects``:

1. undecodable, not a LockRequest, misrouted or invalid: a dead letter (and a refusal when it
   says where to answer), then go on;
2. load the table's lock, ``state.apply`` the request at its offset (a redelivered request is
   skipped: at-least-once delivery, exactly-once effect);
3. store the new state in the table; its id goes into ``Effects.changelog``;
4. the replies go into ``Effects.replies``.

The worker produces the replies at once and the changelog record later (``deferred``: one
record per changed table every changelog interval). Replies may be sent before the changelog
write is durable: every decision is a function of the request log (see ``state``), and
offsets are committed only after the changelog records covering them were acknowledged, so a
crash in between re-applies the same requests to the same decisions, and at worst a reply is
sent twice (clients ignore replies they no longer wait for).

``ExpiryScanner.tick`` (the worker's timer) finds leases past their (conservative) expiry and
sends an ``expire`` request for each, through the same topic and partition as the table's
requests, so the handler applies expiry in order with everything else; only for a table the
worker calls ``expirable`` (its lock's deadline is durable: see ``deferred``).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from lakewarden.clients import lock_request
from lakewarden.events import EventCodec, EventDecodeError, InvalidEvent, default_codec
from lakewarden.events.dlq import Rejection, dead_letter_record
from lakewarden.lock.protocol import parse_request, refusal_for, reply_record
from lakewarden.lock.state import (
    Outcome,
    Reply,
    Request,
    apply,
    expire_request,
)
from lakewarden_services._common.dlq import DEAD_LETTERS
from lakewarden_services.timeline_lock import metrics
from lakewarden_services.timeline_lock.state_json import (
    due_expiry_json,
    lock_from_json,
    lock_to_json,
)

log = logging.getLogger(__name__)

SERVICE = "timeline-lock"

Clock = Callable[[], int]
SendRequest = Callable[[str, dict[str, Any]], None]


def wall_clock_ms() -> int:
    """The service clock: epoch milliseconds (lease deadlines survive a restart in it)."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class Consumed:
    """A message of ``lock.requests`` as consumed (value undecoded)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp_ms: int = 0


@dataclass(slots=True)
class Effects:
    """What the worker must produce for one message, in field order."""

    replies: list[tuple[str, Reply]] = field(default_factory=list)
    changelog: list[str] = field(default_factory=list)  # table ids whose lock changed
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    # What ``RequestHandler.account`` counts: the request's delay, the request and outcome.
    delay_s: float | None = None
    applied: tuple[Request, Outcome] | None = None


class RequestHandler:
    """Applies lock requests to ``table`` (table id -> ``lock_to_json`` value) and says what
    to answer. ``partitions``/``reply_partitions`` are the two topics' partition counts."""

    def __init__(
        self,
        *,
        table: MutableMapping[str, Any],
        reply_topic: str,
        partitions: Callable[[], int],
        reply_partitions: Callable[[], int],
        consumer_group: str,
        clock: Clock = wall_clock_ms,
        codec: EventCodec | None = None,
    ) -> None:
        self.table = table
        self.reply_topic = reply_topic
        self.partitions = partitions
        self.reply_partitions = reply_partitions
        self.consumer_group = consumer_group
        self.clock = clock
        self.codec = codec or default_codec()

    def handle(self, message: Consumed, *, account: bool = True) -> Effects:
        """Process one message of ``lock.requests`` (see the module docstring). A failure
        while handling it dead-letters it (``handler_error``): one bad request must not stop
        the locks of every table; its sender resends or times out.

        ``account``: count it in the metrics now. The worker passes False and calls
        ``account(effects)`` once the replies are handed to librdkafka: a client waits for
        the reply, nobody waits for the metrics."""
        now_ms = self.clock()
        effects = Effects()
        try:
            self._handle(message, effects, now_ms)
        except Exception as err:
            log.exception("lock request failed", extra={"kafka_offset": message.offset})
            why = Rejection("handler_error", f"{type(err).__name__}: {err}", type(err).__name__)
            effects = Effects(dead_letters=[self._dead_letter(message, why)])
        if message.timestamp_ms:
            effects.delay_s = max(0.0, (now_ms - message.timestamp_ms) / 1000)
        if account:
            self.account(effects)
        return effects

    def account(self, effects: Effects) -> None:
        """Count a handled request in the metrics (see ``handle``)."""
        if effects.delay_s is not None:
            metrics.REQUEST_DELAY.observe(effects.delay_s)
        if effects.applied is not None:
            _count(*effects.applied)

    def _handle(self, message: Consumed, effects: Effects, now_ms: int) -> None:
        try:
            name, record = self.codec.decode(message.value)
        except EventDecodeError as err:
            effects.dead_letters.append(self._dead_letter(message, err))  # 1.
            return
        try:
            table_id, request = parse_request(
                name,
                record,
                key=message.key,
                partition=message.partition,
                partitions=self.partitions(),
                reply_topic=self.reply_topic,
                reply_partitions=self.reply_partitions(),
            )
        except InvalidEvent as err:
            self._reject(message, record, err, effects)
            return
        state = lock_from_json(self.table.get(table_id))  # 2.
        outcome = apply(state, request, offset=message.offset, now_ms=now_ms)
        if outcome.duplicate:
            metrics.DUPLICATES.inc()
            return
        self.table[table_id] = lock_to_json(outcome.state)  # 3.
        effects.changelog.append(table_id)
        for reply in outcome.replies:  # 4.
            if request.wants_reply or reply.request_id != request.request_id:
                effects.replies.append((table_id, reply))
        effects.applied = (request, outcome)

    def _reject(self, message: Consumed, record: Any, err: InvalidEvent, effects: Effects) -> None:
        effects.dead_letters.append(self._dead_letter(message, Rejection(err.reason, err.detail)))
        if err.reason != "invalid_request" or not isinstance(record, dict):
            return
        refusal = refusal_for(record, err.detail)
        partition = None if refusal is None else refusal.route.partition
        if refusal is not None and (partition is None or partition < self.reply_partitions()):
            effects.replies.append((str(record["envelope"]["table_id"]), refusal))

    def _dead_letter(self, message: Consumed, why: Rejection | EventDecodeError) -> dict[str, Any]:
        rejection = Rejection.of(why)
        DEAD_LETTERS.labels(SERVICE, rejection.reason).inc()
        log.warning(
            "dead-lettered an event: %s",
            rejection.detail,
            extra={
                "reason": rejection.reason,
                "kafka_topic": message.topic,
                "kafka_partition": message.partition,
                "kafka_offset": message.offset,
            },
        )
        return dead_letter_record(
            rejection,
            topic=message.topic,
            partition=message.partition,
            offset=message.offset,
            key=message.key,
            value=message.value,
            producer_id=SERVICE,
            consumer_group=self.consumer_group,
            codec=self.codec,
        )


def _count(request: Request, outcome: Outcome) -> None:
    answer = next((r for r in outcome.replies if r.request_id == request.request_id), None)
    status = answer.status if answer is not None else ("expired" if outcome.ended else "noop")
    metrics.requests(request.kind, status).inc()
    for grant in outcome.grants:
        metrics.GRANTS.inc()
        metrics.WAIT.observe(grant.waited_ms / 1000)
    for ended in outcome.ended:
        metrics.ended(ended.how).inc()
        metrics.HOLD.observe(ended.held_ms / 1000)
        if ended.how == "expired":
            metrics.EXPIRIES.inc()


class ExpiryScanner:
    """The timer's work: find overdue leases, ask the handler to expire them, update gauges.

    ``_sent`` only remembers which expire requests are in flight, so one overdue lease is not
    asked about on every tick; it is a cache, not state (losing it costs a duplicate request,
    which the handler ignores because it names a lease version that no longer exists).
    """

    def __init__(
        self,
        *,
        table: Mapping[str, Any],
        send_request: SendRequest,
        owned_since: Callable[[], int],
        producer_id: str,
        clock: Clock = wall_clock_ms,
        resend_after_ms: int = 2_000,
        expirable: Callable[[str], bool] = lambda _table_id: True,
    ) -> None:
        self.table = table
        self.send_request = send_request
        self.owned_since = owned_since
        self.producer_id = producer_id
        self.clock = clock
        self.resend_after_ms = resend_after_ms
        self.expirable = expirable
        self._sent: dict[tuple[str, int, int], int] = {}

    def tick(self) -> int:
        """Send expire requests for overdue leases; return how many were sent."""
        now, owned_since = self.clock(), self.owned_since()
        held = waiting = sent = 0
        still_due: dict[tuple[str, int, int], int] = {}
        for table_id, data in list(self.table.items()):
            if data is None or data.get("holder") is None:
                continue
            held += 1
            waiting += len(data["queue"])
            holder = due_expiry_json(data, now_ms=now, owned_since_ms=owned_since)
            if holder is None or not self.expirable(table_id):
                continue  # not due, or its lease's deadline is not durable yet: next tick
            version = (table_id, holder.token, holder.expires_ms)
            last = self._sent.get(version)
            if last is not None and now - last < self.resend_after_ms:
                still_due[version] = last
                continue
            request = expire_request(holder, request_id=str(uuid.uuid4()), owner=self.producer_id)
            self.send_request(table_id, self._record(table_id, request))
            still_due[version] = now
            sent += 1
        self._sent = still_due
        metrics.TABLES.set(len(self.table))
        metrics.HELD_TABLES.set(held)
        metrics.QUEUE_LENGTH.set(waiting)
        metrics.EXPIRE_SENT.inc(sent)
        return sent

    def _record(self, table_id: str, request: Request) -> dict[str, Any]:
        return lock_request(
            table_id=table_id,
            producer_id=self.producer_id,
            request_id=request.request_id,
            kind="expire",
            owner=request.owner,
            ttl_ms=0,
            reply_topic="",
            reply_partition=None,
            reply_key=None,
            token=request.token,
            lease_expires_ms=request.lease_expires_ms,
        )


def reply_value(reply: Reply, *, table_id: str, codec: EventCodec) -> bytes:
    """The encoded ``LockReply`` for ``reply``."""
    return codec.encode("LockReply", reply_record(reply, table_id=table_id, producer_id=SERVICE))
