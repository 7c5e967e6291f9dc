"""``epoch_ms_codec``: the same events, ``timestamp-millis`` fields as epoch ms."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from fastavro import schemaless_reader

from lakewarden.events import default_codec, make_event
from lakewarden.events.codec import HEADER_SIZE, epoch_ms_codec
from lakewarden.events.samples import sample_events

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


def test_the_codec_reads_every_event_as_schemaless_reader_does() -> None:
    # The codec calls fastavro's record reader with its set-up done once (``_body_reader``):
    # every record must be the one schemaless_reader reads, value for value.
    codec = default_codec()
    for name, record in sample_events(codec=codec).items():
        data = codec.encode(name, record)
        buffer = io.BytesIO(data)
        buffer.seek(HEADER_SIZE)
        expected = schemaless_reader(buffer, codec.schemas.current[name].parsed)
        assert codec.decode(data) == (name, expected), name
        assert codec.decode_envelope(data) == (name, expected["envelope"]), name
