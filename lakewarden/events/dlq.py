"""The dead-letter contract shared by every consumer: ``EventConsumer`` and the services'
confluent-kafka loops.

A message a consumer cannot use is kept byte for byte in ``<prefix>dlq`` as a ``DeadLetter``
event, with why it failed and where it came from, so nothing is lost and the consumer keeps
going. Two kinds of bad messages, one constructor, ``dead_letter_record``:

- undecodable bytes: pass the codec's ``EventDecodeError`` (its ``reason``: ``too_short``,
  ``bad_magic``, ``unknown_fingerprint``, ...);
- decodable but unusable (the wrong event type on the topic, a missing field, a key that does
  not match the table): pass a ``Rejection`` naming the reason (a service's parsing raises
  ``InvalidEvent``, which carries it).

``Undecodable`` is what a service's loop hands its handler instead of raising, so the handler
dead-letters it in order with its other effects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from lakewarden.errors import NonRetryableError
from lakewarden.events.codec import EventCodec, EventDecodeError
from lakewarden.events.envelope import make_event


class Undecodable(NamedTuple):
    """A message value the codec rejected: the error and the original bytes."""

    error: EventDecodeError
    data: bytes


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a decodable message cannot be used: the ``DeadLetter``'s ``reason`` (a short
    machine-readable name such as ``invalid_request``), ``detail`` and ``error_type``."""

    reason: str
    detail: str
    error_type: str = "InvalidEvent"

    @classmethod
    def of(cls, why: Rejection | EventDecodeError) -> Rejection:
        """``why`` itself, or the rejection a decode error stands for."""
        if isinstance(why, Rejection):
            return why
        return cls(why.reason, str(why), type(why).__name__)


class InvalidEvent(NonRetryableError):
    """A decodable event a service cannot use; ``reason`` is the dead-letter reason code
    (``unexpected_event``, ``key_mismatch``, ``misrouted``, ``invalid_request``, ...) and
    ``detail`` says what was wrong. Handling the same event again fails the same way, so the
    service dead-letters it and goes on."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def dead_letter_record(
    why: Rejection | EventDecodeError,
    *,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes,
    producer_id: str,
    consumer_group: str | None = None,
    codec: EventCodec | None = None,
) -> dict[str, Any]:
    """The ``DeadLetter`` record of the message at ``topic``/``partition``/``offset`` (its
    table is the key when the key is UTF-8, as every lakewarden producer keys by table id;
    else empty). ``value`` is the message's original bytes."""
    rejection = Rejection.of(why)
    return make_event(
        "DeadLetter",
        table_id=table_id_from_key(key),
        producer_id=producer_id,
        codec=codec,
        topic=topic,
        partition=partition,
        offset=offset,
        key=key,
        value=value,
        reason=rejection.reason,
        detail=rejection.detail,
        error_type=rejection.error_type,
        consumer_group=consumer_group,
    )


def table_id_from_key(key: bytes | None) -> str:
    """The table id a message key names, or ``""`` when it is absent or not UTF-8."""
    if key is None:
        return ""
    try:
        return key.decode()
    except UnicodeDecodeError:
        return ""
