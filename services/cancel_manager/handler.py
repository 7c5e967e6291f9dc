"""What cancel-manager does with one event, apart from Kafka (so tests can drive it directly;
the loop, ``loop.Loop``, runs each handler to completion on its own thread).

``RequestHandler.handle`` takes one message of ``cancel.requests``:

1. undecodable, not a CancelRequest, keyed wrongly or invalid: dead-letter it; an invalid
   request that names its table and request id is also answered (``invalid_request``), so
   its sender does not wait for a timeout;
2. apply it (``CancelWorker.run``, through ``run_blocking``), with the URI remembered for
   the table when the request names none;
3. a request that named a table's URI and found the table there registers it in ``tables``
   (table id -> URI, ``_common.registry.TablesRegistry``: changelogged, partitioned like
   ``cancel.requests`` and so like ``heartbeat.expired``: one instance owns both) and waits
   until that is durable, so a restarted or new owner still knows where the table is when
   its executor dies;
4. publish the ``TimelineTransition`` of every entry the service appended, then the
   ``CancelResult``; then the worker releases the table lock a ``request`` kept.

``ExpiryHandler.handle`` takes one ``HeartbeatExpired``: when the dead executor's plan has a
cancel request (and ``tables`` knows where the table is), the service runs ``execute_cancel``
itself and publishes its transitions.

Delivery is at-least-once and every step is idempotent (a repeated request answers
``already_requested`` / ``already_aborted``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from lakewarden.clients.timeline_events import transition_record
from lakewarden.events import Event, InvalidEvent, Undecodable
from lakewarden.table.timeline import TimelineEntry
from lakewarden_services._common.dlq import DeadLetterSink, Message, dead_letter_failures
from lakewarden_services.cancel_manager import metrics
from lakewarden_services.cancel_manager.protocol import (
    CancelCommand,
    Outcome,
    parse_expiry,
    parse_request,
    refusal_for,
    result_record,
)
from lakewarden_services.cancel_manager.worker import CancelWorker

__all__ = ["ExpiryHandler", "RequestHandler"]

log = logging.getLogger(__name__)

RunBlocking = Callable[[Callable[[], Any]], Awaitable[Any]]
SendEvent = Callable[[str, Event], Awaitable[None]]
# table id -> URI (the service's TablesRegistry; a dict in tests).
Registry = MutableMapping[str, Any]
# Statuses of a request that did not find its table where it said.
_NOT_FOUND = frozenset({"unknown_table"})


async def _nothing_to_wait_for() -> None:
    return None


class RequestHandler:
    """Answers cancel requests."""

    def __init__(
        self,
        *,
        worker: CancelWorker,
        run_blocking: RunBlocking,
        send_result: SendEvent,
        send_transition: SendEvent,
        dead_letters: DeadLetterSink,
        producer_id: str,
        registry: Registry | None = None,
        persisted: Callable[[], Awaitable[None]] = _nothing_to_wait_for,
    ) -> None:
        """``registry``: where each table is (table id -> URI); ``persisted`` returns once
        its changes so far are durable (``TablesRegistry.wait_durable``)."""
        self.worker = worker
        self.run_blocking = run_blocking
        self.send_result = send_result
        self.send_transition = send_transition
        self.dead_letters = dead_letters
        self.producer_id = producer_id
        self.registry: Registry = registry if registry is not None else {}
        self.persisted = persisted

    def lock_ahead(self, key: bytes | None) -> None:
        """A message keyed ``key`` (a table id) was just read, not decoded yet: send that
        table's lock acquire ahead (``CancelWorker.lock_ahead``), so that its round trip
        overlaps decoding and handling the request; ``handle`` withdraws it if no lock
        section takes it up. Never raises."""
        if key:
            try:
                self.worker.lock_ahead(key.decode())
            except UnicodeDecodeError:
                pass  # not a table id: the request is dead-lettered

    async def handle(self, message: Message, value: Any) -> None:
        """Process one message of ``cancel.requests``; a failure of the service itself
        dead-letters the request (``handler_error``) and the service keeps serving."""
        try:
            await dead_letter_failures(
                self.dead_letters, message, self._handle(message, value), what="cancel request"
            )
        finally:
            # What lock_ahead sent and no lock section took up (a malformed request, a failure
            # before the lock) is withdrawn here, after every request, and only here.
            await self.run_blocking(self.worker.drop_lock_ahead)

    async def _handle(self, message: Message, value: Any) -> None:
        if isinstance(value, Undecodable):
            await self.dead_letters.undecodable(message, value)  # 1.
            metrics.RESULTS.labels("unknown", "invalid_request").inc()
            return
        name, record = value
        try:
            command = parse_request(name, record, key=message.key)
        except InvalidEvent as err:
            await self.dead_letters.reject(message, reason=err.reason, detail=err.detail)
            metrics.RESULTS.labels("unknown", "invalid_request").inc()
            refusal = refusal_for(record, err, producer_id=self.producer_id)
            if refusal is not None:
                table_id = str(refusal["envelope"]["table_id"])
                await self.send_result(table_id, Event("CancelResult", refusal))
            return
        started = time.monotonic()
        try:
            outcome = await self._apply(command)  # 2., 3., 4.
        finally:
            # A request's table lock is released once its result is out (worker doc).
            await self.run_blocking(self.worker.release_held)
        metrics.RESULTS.labels(command.kind, outcome.status).inc()
        metrics.DURATION.observe(time.monotonic() - started)
        log.info(
            "cancel %s: %s",
            command.kind,
            outcome.status,
            extra={
                "table": command.table_id,
                "instant": command.instant,
                "request_id": command.request_id,
                "requester": command.requester,
                "reason": outcome.reason,
            },
        )

    async def _apply(self, command: CancelCommand) -> Outcome:
        known = self.registry.get(command.table_id)
        outcome: Outcome = await self.run_blocking(  # 2.
            lambda: self.worker.run(command, known_uri=known)
        )
        if command.table_uri and outcome.status not in _NOT_FOUND and known != command.table_uri:
            self.registry[command.table_id] = command.table_uri  # 3.
            await self.persisted()
        await publish_transitions(  # 4.
            self.send_transition, command.table_id, outcome.entries, self.producer_id
        )
        record = result_record(command, outcome, producer_id=self.producer_id)
        await self.send_result(command.table_id, Event("CancelResult", record))
        return outcome


class ExpiryHandler:
    """Finishes the cancellation of plans whose executor died."""

    def __init__(
        self,
        *,
        worker: CancelWorker,
        run_blocking: RunBlocking,
        send_transition: SendEvent,
        dead_letters: DeadLetterSink,
        producer_id: str,
        registry: Registry | None = None,
    ) -> None:
        self.worker = worker
        self.run_blocking = run_blocking
        self.send_transition = send_transition
        self.dead_letters = dead_letters
        self.producer_id = producer_id
        self.registry: Registry = registry if registry is not None else {}

    async def handle(self, message: Message, value: Any) -> None:
        """Process one ``HeartbeatExpired``; bad events are dead-lettered."""
        await dead_letter_failures(
            self.dead_letters, message, self._handle(message, value), what="heartbeat expiry"
        )

    async def _handle(self, message: Message, value: Any) -> None:
        if isinstance(value, Undecodable):
            await self.dead_letters.undecodable(message, value)
            return
        name, record = value
        try:
            expiry = parse_expiry(name, record, key=message.key)
        except InvalidEvent as err:
            await self.dead_letters.reject(message, reason=err.reason, detail=err.detail)
            return
        uri = self.registry.get(expiry.table_id)
        outcome: Outcome | None = await self.run_blocking(
            lambda: self.worker.expired(expiry, uri=uri)
        )
        if outcome is None:
            return
        await publish_transitions(
            self.send_transition, expiry.table_id, outcome.entries, self.producer_id
        )
        metrics.AUTO_ABORTS.labels(outcome.status).inc()
        log.info(
            "executor %s of cancel-requested plan died: execute_cancel %s",
            expiry.owner,
            outcome.status,
            extra={"table": expiry.table_id, "instant": expiry.instant, "reason": outcome.reason},
        )


async def publish_transitions(
    send: SendEvent, table_id: str, entries: tuple[TimelineEntry, ...], producer_id: str
) -> None:
    for entry in entries:
        record = transition_record(entry, table_id=table_id, producer_id=producer_id)
        await send(table_id, Event("TimelineTransition", record))
        metrics.TRANSITIONS.labels(str(entry.transition)).inc()
