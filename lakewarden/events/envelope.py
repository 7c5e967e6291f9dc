"""Building the envelope every event starts with.

The envelope is a plain dict (the codec's hot path is fastavro on dicts). ``event_time`` is
written as epoch milliseconds; it decodes as a timezone-aware UTC ``datetime``.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from lakewarden.events.codec import EventCodec, default_codec


def now_ms() -> int:
    """Wall-clock time in epoch milliseconds (the resolution of ``timestamp-millis``)."""
    return time.time_ns() // 1_000_000


def new_envelope(
    event: str,
    *,
    table_id: str,
    producer_id: str,
    event_time_ms: int | None = None,
    event_id: str | None = None,
    codec: EventCodec | None = None,
) -> dict[str, Any]:
    """A fresh envelope for ``event``: a new uuid4, now, and the event's current schema version.

    Raises:
        EventEncodeError: ``event`` is not a known event.
    """
    schema = (codec or default_codec()).schema(event)
    return {
        "event_id": event_id or str(uuid.uuid4()),
        "event_time": now_ms() if event_time_ms is None else event_time_ms,
        "table_id": table_id,
        "producer_id": producer_id,
        "schema_version": schema.version,
    }


def make_event(
    event: str,
    *,
    table_id: str,
    producer_id: str,
    codec: EventCodec | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """An event record: a new envelope plus ``fields`` (the event's own fields).

    Raises:
        EventEncodeError: ``event`` is not a known event.
    """
    envelope = new_envelope(event, table_id=table_id, producer_id=producer_id, codec=codec)
    return {"envelope": envelope, **fields}
