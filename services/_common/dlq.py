"""Dead-lettering from a service's handler: a bad event goes to ``<prefix>dlq``, the service
goes on.

Two kinds of bad events, one contract (``schemas/DeadLetter.avsc``, the original bytes kept):

- undecodable bytes: the loop hands the handler ``Undecodable`` instead of raising
  (``loop_service.consumed``);
  ``reason`` is the codec's (``too_short``, ``bad_magic``, ``unknown_fingerprint``, ...);
- decodable but unusable: the wrong event type on the topic, a missing field, a key that does
  not match the table; the service names the reason (``unexpected_event``, ``invalid_request``,
  ``key_mismatch``, ``misrouted``, ``handler_error``).

The dead letter is produced before the handler takes the next event, and the loop flushes the
producer before it commits offsets, so the offset past a bad event is never committed before
its dead letter is durable (nothing is lost).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any, Protocol

from prometheus_client import Counter

from lakewarden.events import Event, EventDecodeError, Rejection, Undecodable, dead_letter_record

log = logging.getLogger(__name__)

DEAD_LETTERS = Counter(
    "lakewarden_dead_letters_total",
    "Events a service could not use and sent to the dead-letter topic",
    ["service", "reason"],
)


class Message(Protocol):
    """The consumed message a handler gets: ``loop_service.Consumed``."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


class EventTopic(Protocol):
    """Where dead letters are sent: a loop's ``ProducedTopic`` (a fake in unit tests)."""

    async def send(self, *, key: bytes | None, value: Event) -> Any: ...


class DeadLetterSink(Protocol):
    """What a handler needs to dead-letter (``DeadLetters``, or a fake in unit tests)."""

    async def undecodable(self, message: Message, value: Undecodable) -> None: ...

    async def reject(
        self, message: Message, *, reason: str, detail: str, error_type: str = ...
    ) -> None: ...


async def dead_letter_failures(
    sink: DeadLetterSink, message: Message, handling: Awaitable[None], *, what: str
) -> None:
    """Await ``handling`` of ``message``; if the service itself fails on it, dead-letter the
    message (``handler_error``) instead of letting the agent die: one bad event must not stop
    the service for every other table."""
    try:
        await handling
    except Exception as err:
        log.exception("%s failed", what, extra={"kafka_offset": message.offset})
        await sink.reject(
            message,
            reason="handler_error",
            detail=f"{type(err).__name__}: {err}",
            error_type=type(err).__name__,
        )


class DeadLetters:
    """Sends the dead letters of one service to its DLQ topic."""

    def __init__(self, topic: EventTopic, *, service: str, consumer_group: str) -> None:
        self.topic = topic
        self.service = service
        self.consumer_group = consumer_group

    async def undecodable(self, message: Message, value: Undecodable) -> None:
        """Dead-letter a message the codec could not decode."""
        await self._send(message, value.error, value.data)

    async def reject(
        self, message: Message, *, reason: str, detail: str, error_type: str = "InvalidEvent"
    ) -> None:
        """Dead-letter a decodable message the service cannot use, saying why."""
        await self._send(message, Rejection(reason, detail, error_type), message.value)

    async def _send(
        self, message: Message, why: Rejection | EventDecodeError, value: bytes | None
    ) -> None:
        rejection = Rejection.of(why)
        record = dead_letter_record(
            rejection,
            topic=message.topic,
            partition=message.partition,
            offset=message.offset,
            key=message.key,
            value=bytes(value or b""),
            producer_id=self.service,
            consumer_group=self.consumer_group,
        )
        await self.topic.send(key=message.key, value=Event("DeadLetter", record))
        DEAD_LETTERS.labels(self.service, rejection.reason).inc()
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
