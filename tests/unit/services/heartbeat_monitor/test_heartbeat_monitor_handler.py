"""Monitor (what the agents do) driven directly with faust Messages and fakes: no broker."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from faust.types import Message

from lakewarden.clients.liveness import LivenessRecord, record_key
from lakewarden.events import (
    Event,
    EventDecodeError,
    Undecodable,
    decode,
    encode,
    make_event,
)
from services.heartbeat_monitor import metrics
from services.heartbeat_monitor.monitor import Monitor, expiry_event_id
from services.heartbeat_monitor.tracker import Expiry, Tracker

ME = "monitor-test"
INSTANT = "20250314092653589"


class FakeDeadLetters:
    def __init__(self) -> None:
        self.letters: list[tuple[str, str]] = []

    async def undecodable(self, message: Message, value: Undecodable) -> None:
        self.letters.append((value.error.reason, message.topic))

    async def reject(
        self, message: Message, *, reason: str, detail: str, error_type: str = "InvalidEvent"
    ) -> None:
        self.letters.append((reason, message.topic))


class Harness:
    def __init__(self) -> None:
        self.table: dict[bytes, bytes] = {}
        self.sent: list[dict[str, Any]] = []
        self.dlq = FakeDeadLetters()
        self.tracker = Tracker(instance_id=ME, forget_after_ms=60_000)
        self.wall_ms = 1_000_000
        self.monitor = Monitor(
            tracker=self.tracker,
            table=self.table,
            send_expired=self._send,
            dead_letters=self.dlq,
            producer_id=ME,
            clock=lambda: self.wall_ms,
        )
        self.offset = 0

    async def _send(self, expiry: Expiry, record: dict[str, Any]) -> Any:
        # What the agent's sender does with it: encode (the record must fit the schema).
        self.sent.append(decode(encode("HeartbeatExpired", record)).record)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future

    def message(
        self,
        value: bytes,
        *,
        at_ms: int,
        partition: int = 0,
        key: bytes | None,
        topic: str = "lakewarden.heartbeats",
        log_append: bool = True,
    ) -> Message:
        self.offset += 1
        return Message(
            topic, partition, self.offset, at_ms / 1000, int(log_append), None, key, value, None
        )

    def feed(
        self,
        value: bytes,
        *,
        at_ms: int,
        partition: int = 0,
        key: bytes | None = b"t1",
        log_append: bool = True,
    ) -> None:
        msg = self.message(value, at_ms=at_ms, partition=partition, key=key, log_append=log_append)
        try:
            decoded: Any = decode(value)
        except EventDecodeError as err:
            decoded = Undecodable(err, value)
        asyncio.run(self.monitor.on_heartbeat(msg, decoded))

    def beat(
        self,
        at_ms: int,
        *,
        kind: str = "beat",
        table_id: str = "t1",
        instant: str = INSTANT,
        partition: int = 0,
        **fields: Any,
    ) -> None:
        record = heartbeat(kind=kind, table_id=table_id, instant=instant, **fields)
        self.feed(
            encode("Heartbeat", record), at_ms=at_ms, partition=partition, key=table_id.encode()
        )

    def tick(
        self, at_ms: int, *, partition: int = 0, sent_wall_ms: int | None = None, sender: str = ME
    ) -> None:
        event = self.monitor.tick_record()
        event.record["owner"] = sender
        event.record["envelope"]["event_time"] = sent_wall_ms or self.wall_ms
        self.feed(encode("Heartbeat", event.record), at_ms=at_ms, partition=partition, key=b"")

    def timeline(self, transition: str, *, instant: str = INSTANT) -> None:
        record = make_event(
            "TimelineTransition",
            table_id="t1",
            producer_id="writer",
            seq=3,
            instant=instant,
            action="commit",
            transition=transition,
            actor="w",
            lock_token=1,
            wall_time=0,
            payload="{}",
        )
        msg = self.message(
            encode("TimelineTransition", record), at_ms=0, key=b"t1", topic="lakewarden.timeline"
        )
        asyncio.run(self.monitor.on_timeline(msg, Event("TimelineTransition", record)))

    def record(self, instant: str = INSTANT) -> LivenessRecord | None:
        raw = self.table.get(record_key("t1", instant))
        return None if raw is None else LivenessRecord.decode(raw)


def heartbeat(
    *, kind: str = "beat", table_id: str = "t1", instant: str = INSTANT, **fields: Any
) -> dict[str, Any]:
    values = {
        "instant": instant,
        "owner": "w1",
        "interval_ms": 500,
        "seq": 0,
        "kind": kind,
        "tolerable_misses": 3,
        **fields,
    }
    return make_event("Heartbeat", table_id=table_id, producer_id="w1", **values)


@pytest.fixture
def h() -> Harness:
    harness = Harness()
    harness.monitor.assigned([0, 1])
    harness.tick(0, partition=0)  # grace over on partition 0 at broker time 0
    return harness


def test_beat_then_silence_publishes_one_expiry_and_records_dead(h: Harness) -> None:
    h.beat(1_000)
    assert h.record() is not None and h.record().status == "alive"  # type: ignore[union-attr]
    expiries_before = metrics.EXPIRIES._value.get()

    h.tick(2_500)
    assert h.sent == []
    h.wall_ms += 3_000
    h.tick(2_501)

    [expired] = h.sent
    assert expired["instant"] == INSTANT and expired["owner"] == "w1"
    assert (expired["last_seen_ms"], expired["tolerance_ms"], expired["frontier_ms"]) == (
        1_000,
        1_500,
        2_501,
    )
    assert expired["detected_ms"] == h.wall_ms
    assert expired["envelope"]["event_id"] == expiry_event_id("t1", INSTANT)
    assert h.record().status == "dead"  # type: ignore[union-attr]
    assert metrics.EXPIRIES._value.get() == expiries_before + 1
    h.tick(9_000)
    assert len(h.sent) == 1


def test_no_verdict_before_the_own_first_tick_after_assignment(h: Harness) -> None:
    h.beat(1_000, partition=1)  # partition 1 is still in grace
    h.tick(50_000, partition=1, sender="another-monitor")
    h.tick(60_000, partition=1, sent_wall_ms=h.wall_ms - 1)  # sent before the assignment
    assert h.sent == [] and h.tracker.in_grace(1)
    h.tick(70_000, partition=1)
    assert not h.tracker.in_grace(1)
    h.tick(71_500, partition=1)
    assert h.sent == []
    h.tick(71_501, partition=1)
    assert [e["last_seen_ms"] for e in h.sent] == [1_000]


def test_records_in_the_table_are_judged_after_a_restart() -> None:
    h = Harness()
    alive = LivenessRecord("alive", "w1", 0, 1_000, 1_500, 1_000)
    dead = LivenessRecord("dead", "w1", 0, 1_000, 1_500, 2_600)
    h.table[record_key("t1", INSTANT)] = alive.encode()
    h.table[record_key("t1", "20250314092653590")] = dead.encode()
    h.table[b"not json"] = b"neither"
    h.monitor.assigned([0])

    h.tick(100_000)
    h.tick(101_500)
    assert h.sent == []
    h.tick(101_501)
    assert [e["instant"] for e in h.sent] == [INSTANT]


def test_final_beat_ends_the_instant_without_expiry(h: Harness) -> None:
    h.beat(1_000)
    h.beat(1_200, kind="final")
    h.tick(30_000)
    assert h.sent == [] and h.record().status == "ended"  # type: ignore[union-attr]


def test_terminal_transition_deletes_the_record_on_the_next_message(h: Harness) -> None:
    h.beat(1_000)
    h.timeline("inflight")
    assert h.record() is not None
    h.timeline("completed")
    assert h.record() is not None  # written when its partition's next message comes
    h.tick(1_100)
    assert h.record() is None
    h.beat(1_200)  # a late beat is ignored
    h.tick(30_000)
    assert h.record() is None and h.sent == []


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"\x00not an event at all", "bad_magic"),
        (b"\xc3\x01\x00", "too_short"),
    ],
)
def test_undecodable_heartbeats_are_dead_lettered_and_still_move_time(
    h: Harness, value: bytes, reason: str
) -> None:
    h.beat(1_000)
    h.feed(value, at_ms=2_501)
    assert h.dlq.letters == [(reason, "lakewarden.heartbeats")]
    assert len(h.sent) == 1  # its timestamp is time all the same


@pytest.mark.parametrize(
    ("fields", "key", "reason"),
    [
        ({"instant": "2025"}, b"t1", "invalid_event"),
        ({"interval_ms": 0}, b"t1", "invalid_event"),
        ({"tolerable_misses": 0}, b"t1", "invalid_event"),
        ({}, b"other-table", "key_mismatch"),
    ],
)
def test_invalid_heartbeats_are_dead_lettered(
    h: Harness, fields: dict[str, Any], key: bytes, reason: str
) -> None:
    h.feed(encode("Heartbeat", heartbeat(**fields)), at_ms=1_000, key=key)
    assert h.dlq.letters == [(reason, "lakewarden.heartbeats")]
    assert len(h.tracker) == 0


def test_other_events_on_the_topics_are_dead_lettered(h: Harness) -> None:
    expired = make_event(
        "HeartbeatExpired",
        table_id="t1",
        producer_id="x",
        instant=INSTANT,
        owner="w",
        last_seen_ms=0,
        detected_ms=0,
    )
    h.feed(encode("HeartbeatExpired", expired), at_ms=1_000)
    msg = h.message(b"\x00", at_ms=0, key=b"t1", topic="lakewarden.timeline")
    asyncio.run(h.monitor.on_timeline(msg, Event("Heartbeat", heartbeat())))
    msg = h.message(b"\x00", at_ms=0, key=b"t1", topic="lakewarden.timeline")
    asyncio.run(
        h.monitor.on_timeline(msg, Undecodable(EventDecodeError("bad_magic", "x"), b"\x00"))
    )
    assert h.dlq.letters == [
        ("unexpected_event", "lakewarden.heartbeats"),
        ("unexpected_event", "lakewarden.timeline"),
        ("bad_magic", "lakewarden.timeline"),
    ]


def test_producer_stamped_messages_are_judged_by_the_monitor_clock(h: Harness) -> None:
    before = metrics.CREATE_TIME._value.get()
    record = heartbeat()
    h.feed(encode("Heartbeat", record), at_ms=1, log_append=False)  # a writer's clock: ignored
    assert h.record().last_seen_ms == h.wall_ms  # type: ignore[union-attr]
    assert metrics.CREATE_TIME._value.get() == before + 1
