"""``CancelClient``: RFC-79's cancel APIs through the cancel-manager service.

    with CancelClient(settings) as client:
        result = client.request_cancel(table, instant, requester="ops", reason="reindex")
        result = client.execute_cancel(table, instant, requester="ops")

Protocol of one call:

1. read the results topic from its current end (every partition, so no reply is missed);
2. send the ``CancelRequest`` (kind ``request`` or ``execute``, a fresh ``request_id``, the
   table's id as the key and its URI) and flush it;
3. wait for the ``CancelResult`` with that ``request_id``.

The result is returned as it came (``CancelResult.status`` says what happened; a refusal is
a status, not an exception: the CLI prints it, a writer decides). No answer in time raises
``CancelServiceUnavailableError`` (the request may still be applied: cancel requests are
idempotent, so asking again is safe).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Literal

from lakewarden.clients._results import listen_from_end
from lakewarden.errors import RetryableError
from lakewarden.events import (
    EventConsumer,
    EventDeliveryError,
    EventProducer,
    make_event,
)
from lakewarden.events.latency import LOW_LATENCY_CONSUMER, LOW_LATENCY_PRODUCER
from lakewarden.events.topics import CANCEL_RESULTS
from lakewarden.settings import Settings

__all__ = ["CancelClient", "CancelReply", "CancelServiceUnavailableError"]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 60.0


class CancelServiceUnavailableError(RetryableError):
    """No answer from cancel-manager (not running, topic missing, broker down, timeout)."""


@dataclass(frozen=True)
class CancelReply:
    """A ``CancelResult``: ``status`` (accepted, already_requested, aborted, already_aborted,
    refused_completed, refused_executing, not_cancellable, not_requested, unknown_instant,
    unknown_table, invalid_request, failed), ``outcome`` (the coarse v1 value), ``reason``."""

    request_id: str
    instant: str
    status: str
    outcome: str
    reason: str | None
    error_type: str | None

    @property
    def ok(self) -> bool:
        """The asked-for state holds (newly or already)."""
        return self.outcome != "refused"


class CancelClient:
    """Sends cancel requests to cancel-manager and waits for the answers. Thread-safe."""

    def __init__(self, settings: Settings, *, producer_id: str | None = None) -> None:
        self.settings = settings
        self.producer_id = producer_id or f"cancel-client@{socket.gethostname()}:{os.getpid()}"
        self._guard = threading.Lock()
        self._producer: EventProducer | None = None
        self._consumer: EventConsumer | None = None

    def request_cancel(
        self,
        table_id: str,
        instant: str,
        *,
        table_uri: str,
        requester: str,
        reason: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> CancelReply:
        """Ask cancel-manager to append ``cancel_requested`` (irrevocable).

        Raises: CancelServiceUnavailableError."""
        return self._call("request", table_id, instant, table_uri, requester, reason, timeout_s)

    def execute_cancel(
        self,
        table_id: str,
        instant: str,
        *,
        table_uri: str,
        requester: str,
        reason: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> CancelReply:
        """Ask cancel-manager to delete the plan's files and append ``aborted``.

        Raises: CancelServiceUnavailableError."""
        return self._call("execute", table_id, instant, table_uri, requester, reason, timeout_s)

    def close(self) -> None:
        with self._guard:
            consumer, self._consumer = self._consumer, None
            producer, self._producer = self._producer, None
        if consumer is not None:
            consumer.close()
        if producer is not None:
            try:
                producer.close(timeout_s=5)
            except EventDeliveryError as err:
                log.warning("closing the cancel client: %s", err)

    def __enter__(self) -> CancelClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(
        self,
        kind: Literal["request", "execute"],
        table_id: str,
        instant: str,
        table_uri: str,
        requester: str,
        reason: str | None,
        timeout_s: float,
    ) -> CancelReply:
        request_id = uuid.uuid4().hex
        with self._guard:
            deadline = time.monotonic() + timeout_s
            consumer = self._listen()  # 1.
            record = make_event(
                "CancelRequest",
                table_id=table_id,
                producer_id=self.producer_id,
                request_id=request_id,
                instant=instant,
                kind=kind,
                requester=requester,
                reason=reason,
                table_uri=table_uri,
            )
            self._send(record)  # 2.
            while (left := deadline - time.monotonic()) > 0:  # 3.
                message = consumer.poll_message(min(0.5, left))
                if message is None:
                    continue
                event = consumer.decode(message)
                if event is None or event.name != "CancelResult":
                    continue
                if event.record["request_id"] == request_id:
                    r = event.record
                    return CancelReply(
                        request_id,
                        r["instant"],
                        r.get("status") or r["outcome"],
                        r["outcome"],
                        r.get("reason"),
                        r.get("error_type"),
                    )
        raise CancelServiceUnavailableError(
            f"no answer from cancel-manager within {timeout_s:g} s for the {kind} of instant "
            f"{instant}. Help: is cancel-manager running (`lakewarden dev up`)? The request may "
            "still be applied; asking again is safe (it is idempotent).",
            table=table_id,
            instant=instant,
        )

    def _listen(self) -> EventConsumer:
        self._consumer = listen_from_end(
            self._consumer,
            self.settings,
            CANCEL_RESULTS,
            client="cancel-client",
            service="cancel-manager",
            unavailable=CancelServiceUnavailableError,
            log=log,
            **LOW_LATENCY_CONSUMER,  # a caller waits for each result
        )
        return self._consumer

    def _send(self, record: dict[str, object]) -> None:
        if self._producer is None:
            self._producer = EventProducer(
                self.settings, producer_id=self.producer_id, **LOW_LATENCY_PRODUCER
            )
        self._producer.send("CancelRequest", record)
        try:
            self._producer.flush()
        except EventDeliveryError as err:
            raise CancelServiceUnavailableError(
                f"the cancel request could not be delivered ({err}). Help: retry; it is idempotent."
            ) from err
