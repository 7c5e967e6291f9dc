"""Reading a service's compacted changelog back: the state a plain-loop service recovers when
it is assigned partitions (heartbeat-monitor's liveness, timeline-lock's locks)."""

from __future__ import annotations

import logging
import time
from typing import Final

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from lakewarden.events import EventConsumer, EventConsumerError
from lakewarden.settings import Settings

log = logging.getLogger(__name__)

_BATCH: Final = 5_000
_TIMEOUT_S: Final = 120.0


def recover_changelog(
    settings: Settings, *, group_id: str, topic: str, partitions: list[int]
) -> dict[bytes, bytes]:
    """The latest record of every key of ``partitions`` of ``topic`` (deletes applied), read
    by a consumer of its own (group ``<group_id>-recovery``, never committed).

    Raises:
        EventConsumerError: the changelog could not be read to its end within 120 s.
    """
    if not partitions:
        return {}
    reader = EventConsumer(
        settings,
        group_id=f"{group_id}-recovery",
        auto_commit=False,
        dead_letters=False,
        logger=log,
    )
    try:
        return read_to_end(reader, topic, partitions)
    finally:
        reader.close()


def read_to_end(reader: EventConsumer, topic: str, partitions: list[int]) -> dict[bytes, bytes]:
    """Raises: EventConsumerError (the offsets could not be read, or not to the end in time)."""
    ends = {}
    for partition in partitions:
        # A topic created a moment ago may have no leader yet: retried for up to 30 s.
        low, high = reader.watermarks(topic, partition, timeout_s=30.0)
        if high > low:
            ends[partition] = high
    records: dict[bytes, bytes] = {}
    if not ends:
        return records
    reader.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
    deadline = time.monotonic() + _TIMEOUT_S
    while ends:
        if time.monotonic() > deadline:
            raise EventConsumerError(f"recovering {topic}: not read to the end within 120 s")
        for msg in reader.consume(_BATCH, 0.2):
            key, value = msg.key(), msg.value()
            if key is None:
                continue
            if value is None:
                records.pop(key, None)
            else:
                records[key] = value
        # Positions, not offsets seen: compaction may have removed the last records.
        for partition, position in reader.positions(topic, ends).items():
            if position >= ends[partition]:
                del ends[partition]
    return records
