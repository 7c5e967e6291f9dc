"""``epoch_ms_codec``: the same events, ``timestamp-millis`` fields as epoch ms."""

from __future__ import annotations

from datetime import UTC, datetime

from lakewarden.events import default_codec, make_event
from lakewarden.events.codec import epoch_ms_codec

WALL = datetime(2025, 3, 14, 9, 26, 53, 589_000, tzinfo=UTC)


def test_timestamps_decode_as_the_epoch_ms_the_default_codec_turns_into_datetimes() -> None:
    record = make_event(
        "TimelineTransition",
        table_id="t",
        producer_id="p",
        seq=0,
        instant="20250314092653589",
        action="commit",
        transition="requested",
        actor="a",
        lock_token=None,
        wall_time=WALL,
        payload="{}",
    )
    data = default_codec().encode("TimelineTransition", record)
    full = default_codec().decode(data).record
    lean = epoch_ms_codec().decode(data).record

    assert full["wall_time"] == WALL
    assert lean["wall_time"] == 1_741_944_413_589 == int(WALL.timestamp() * 1000)
    assert lean["envelope"]["event_time"] == int(full["envelope"]["event_time"].timestamp() * 1000)
    assert {k: v for k, v in lean.items() if k not in ("wall_time", "envelope")} == {
        k: v for k, v in full.items() if k not in ("wall_time", "envelope")
    }
    _, envelope = epoch_ms_codec().decode_envelope(data)
    assert envelope["event_time"] == lean["envelope"]["event_time"]
