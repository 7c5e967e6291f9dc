"""What timeline-lock's agent and timer do, apart from faust (so tests can drive it directly).

``RequestHandler.handle`` takes one message of ``lock.requests``:

1. undecodable, not a LockRequest, misrouted or invalid: dead-letter it (and refuse it when it
   says where to answer), then go on;
2. load the table's lock, ``state.apply`` the request at its offset (a redelivered request is
   skipped: at-least-once delivery, exactly-once effect);
3. store the new state (the faust table sends it to the changelog);
4. send the replies.

Replies may be sent before the changelog write is durable: every decision is a function of
the request log (see ``state``), so a crash in between re-applies the same requests to the same
decisions, and at worst a reply is sent twice (clients ignore replies they no longer wait for).

``ExpiryScanner.tick`` (the timer) finds leases past their (conservative) expiry and sends an
``expire`` request for each, through the same topic and partition as the table's requests, so
the agent applies expiry in order with everything else.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from faust.types import Message

from lakewarden.clients import lock_request
from lakewarden.events import Event, Undecodable
from services._common.dlq import DeadLetterSink, dead_letter_failures
from services.timeline_lock import metrics
from services.timeline_lock.protocol import (
    InvalidRequest,
    parse_request,
    refusal_for,
    reply_record,
)
from services.timeline_lock.state import (
    Outcome,
    Reply,
    Request,
    apply,
    expire_request,
)
from services.timeline_lock.state_json import due_expiry_json, lock_from_json, lock_to_json

log = logging.getLogger(__name__)

Clock = Callable[[], int]
SendReply = Callable[[str, Reply], Awaitable[None]]
SendRequest = Callable[[str, dict[str, Any]], Awaitable[None]]


def wall_clock_ms() -> int:
    """The service clock: epoch milliseconds (lease deadlines survive a restart in it)."""
    return time.time_ns() // 1_000_000


class RequestHandler:
    """Applies lock requests to the lock table and answers them."""

    def __init__(
        self,
        *,
        table: MutableMapping[str, Any],
        send_reply: SendReply,
        dead_letters: DeadLetterSink,
        reply_topic: str,
        partitions: Callable[[], int],
        reply_partitions: Callable[[], int],
        clock: Clock = wall_clock_ms,
    ) -> None:
        self.table = table
        self.send_reply = send_reply
        self.dead_letters = dead_letters
        self.reply_topic = reply_topic
        self.partitions = partitions
        self.reply_partitions = reply_partitions
        self.clock = clock

    async def handle(self, message: Message, value: Any) -> None:
        """Process one message of ``lock.requests`` (see the module docstring). A failure
        while handling it dead-letters it (``handler_error``): one bad request must not stop
        the locks of every table; its sender resends or times out."""
        if message.timestamp:
            delay_s = self.clock() / 1000 - message.timestamp
            metrics.REQUEST_DELAY.observe(max(0.0, delay_s))
        await dead_letter_failures(
            self.dead_letters, message, self._handle(message, value), what="lock request"
        )

    async def _handle(self, message: Message, value: Any) -> None:
        if isinstance(value, Undecodable):
            await self.dead_letters.undecodable(message, value)  # 1.
            return
        name, record = value
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
        except InvalidRequest as err:
            await self._reject(message, record, err)
            return
        state = lock_from_json(self.table.get(table_id))  # 2.
        outcome = apply(state, request, offset=message.offset, now_ms=self.clock())
        if outcome.duplicate:
            metrics.DUPLICATES.inc()
            return
        self.table[table_id] = lock_to_json(outcome.state)  # 3.
        for reply in outcome.replies:  # 4.
            if request.wants_reply or reply.request_id != request.request_id:
                await self.send_reply(table_id, reply)
        _count(request, outcome)

    async def _reject(self, message: Message, record: Any, err: InvalidRequest) -> None:
        await self.dead_letters.reject(message, reason=err.reason, detail=err.detail)
        if err.reason != "invalid_request" or not isinstance(record, dict):
            return
        refusal = refusal_for(record, err.detail)
        partition = None if refusal is None else refusal.route.partition
        if refusal is not None and (partition is None or partition < self.reply_partitions()):
            await self.send_reply(str(record["envelope"]["table_id"]), refusal)


def _count(request: Request, outcome: Outcome) -> None:
    answer = next((r for r in outcome.replies if r.request_id == request.request_id), None)
    status = answer.status if answer is not None else ("expired" if outcome.ended else "noop")
    metrics.REQUESTS.labels(request.kind, status).inc()
    for grant in outcome.grants:
        metrics.GRANTS.inc()
        metrics.WAIT.observe(grant.waited_ms / 1000)
    for ended in outcome.ended:
        metrics.ENDED.labels(ended.how).inc()
        metrics.HOLD.observe(ended.held_ms / 1000)
        if ended.how == "expired":
            metrics.EXPIRIES.inc()


class ExpiryScanner:
    """The timer's work: find overdue leases, ask the agent to expire them, update gauges.

    ``_sent`` only remembers which expire requests are in flight, so one overdue lease is not
    asked about on every tick; it is a cache, not state (losing it costs a duplicate request,
    which the agent ignores because it names a lease version that no longer exists).
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
    ) -> None:
        self.table = table
        self.send_request = send_request
        self.owned_since = owned_since
        self.producer_id = producer_id
        self.clock = clock
        self.resend_after_ms = resend_after_ms
        self._sent: dict[tuple[str, int, int], int] = {}

    async def tick(self) -> int:
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
            if holder is None:
                continue
            version = (table_id, holder.token, holder.expires_ms)
            last = self._sent.get(version)
            if last is not None and now - last < self.resend_after_ms:
                still_due[version] = last
                continue
            request = expire_request(holder, request_id=str(uuid.uuid4()), owner=self.producer_id)
            await self.send_request(table_id, self._record(table_id, request))
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


def reply_event(reply: Reply, *, table_id: str, producer_id: str) -> Event:
    """The faust value for a reply."""
    return Event("LockReply", reply_record(reply, table_id=table_id, producer_id=producer_id))
