"""The dead-letter contract shared by EventConsumer and faust services.

A message that cannot be decoded is kept byte for byte in ``<prefix>dlq`` as a ``DeadLetter``
event, with why it failed and where it came from, so nothing is lost and the consumer keeps
going. ``dead_letter_record`` builds that event; ``Undecodable`` is what the faust codec hands
an agent instead of raising (faust would otherwise crash the agent on a decode error).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from lakewarden.events.codec import EventCodec, EventDecodeError
from lakewarden.events.envelope import make_event


class Undecodable(NamedTuple):
    """A message value the codec rejected: the error and the original bytes."""

    error: EventDecodeError
    data: bytes


def dead_letter_record(
    *,
    error: EventDecodeError,
    value: bytes,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    producer_id: str,
    consumer_group: str | None = None,
    codec: EventCodec | None = None,
) -> dict[str, Any]:
    """The ``DeadLetter`` record for an undecodable message (its table is the key when the
    key is UTF-8, as every lakewarden producer keys by table id; else empty)."""
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
        reason=error.reason,
        detail=str(error),
        error_type=type(error).__name__,
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
