"""A heartbeat sent and read back: the smallest proof that a broker (or a cluster, or a
listener with its authentication) carries lakewarden events end to end."""

from __future__ import annotations

import time
import uuid
from typing import Any

from lakewarden.events import EventConsumer, EventProducer, make_event
from lakewarden.events.topics import HEARTBEATS
from lakewarden.settings import Settings

__all__ = ["heartbeat_event", "round_trip_beat"]


def heartbeat_event(
    seq: int,
    *,
    producer_id: str = "round-trip",
    table_id: str = "t",
    instant: str = "20260101000000000",
    owner: str = "me",
    interval_ms: int = 1000,
    tolerable_misses: int = 3,
) -> dict[str, Any]:
    """A valid ``Heartbeat`` (a beat, not a final one), told apart from others by ``seq``."""
    return make_event(
        "Heartbeat",
        table_id=table_id,
        producer_id=producer_id,
        instant=instant,
        owner=owner,
        interval_ms=interval_ms,
        seq=seq,
        kind="beat",
        tolerable_misses=tolerable_misses,
    )


def round_trip_beat(
    settings: Settings, seq: int, *, producer_id: str = "round-trip", timeout_s: float = 90.0
) -> None:
    """Send beat ``seq`` to the heartbeats topic (acks=all, flushed) and read it back with a
    fresh consumer group from the earliest offset.

    Raises:
        EventDeliveryError: the beat was not delivered.
        AssertionError: it was not read back within ``timeout_s``.
    """
    producer = EventProducer(settings, producer_id=producer_id)
    try:
        producer.send("Heartbeat", heartbeat_event(seq, producer_id=producer_id), topic=HEARTBEATS)
        producer.flush(timeout_s)
    finally:
        producer.close(timeout_s)
    consumer = EventConsumer(
        settings,
        group_id=f"round-trip-{uuid.uuid4().hex[:8]}",
        consumer_id=producer_id,
        dead_letters=False,
        auto_offset_reset="earliest",
    )
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        consumer.subscribe([HEARTBEATS.name(settings)])
        while time.monotonic() < deadline:
            got = consumer.poll(1.0)
            if got is not None and got.name == "Heartbeat":
                seen.add(int(got.record["seq"]))
            if seq in seen:
                return
    finally:
        consumer.close()
    raise AssertionError(f"beat {seq} not read back within {timeout_s:g} s; saw {sorted(seen)}")
