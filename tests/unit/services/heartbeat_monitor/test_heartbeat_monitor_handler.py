"""Monitor (what the worker does per message) driven directly with messages: no broker."""

from __future__ import annotations

from typing import Any

import pytest

from lakewarden.clients.liveness import LivenessRecord, record_key
from lakewarden.events import decode, encode, make_event
from lakewarden_services._common.settings import Group
from lakewarden_services.heartbeat_monitor import metrics
from lakewarden_services.heartbeat_monitor.monitor import Consumed, Monitor, expiry_event_id
from lakewarden_services.heartbeat_monitor.tracker import Tracker

ME = "monitor-test"
INSTANT = "20250314092653589"
HEARTBEATS = "lakewarden.heartbeats"


class Harness:
    def __init__(self) -> None:
        self.table: dict[bytes, bytes] = {}
        self.sent: list[dict[str, Any]] = []
        self.letters: list[tuple[str, str]] = []
        self.changelog: list[tuple[int, bytes, bytes | None]] = []
        self.tracker = Tracker(instance_id=ME, forget_after_ms=60_000)
        self.wall_ms = 1_000_000
        self.monitor = Monitor(
            tracker=self.tracker,
            table=self.table,
            producer_id=ME,
            consumer_group="lakewarden.heartbeat-monitor",
            clock=lambda: self.wall_ms,
        )
        self.offset = 0

    def collect(self) -> None:
        """What the worker does with the effects (each record must fit its schema)."""
        effects = self.monitor.take_effects()
        self.sent += [decode(encode("HeartbeatExpired", r)).record for _, r in effects.expired]
        self.changelog += [(w.partition, w.key, w.value) for w in effects.changelog]
        for letter in effects.dead_letters:
            decoded = decode(encode("DeadLetter", letter)).record
            self.letters.append((decoded["reason"], decoded["topic"]))

    def message(
        self,
        value: bytes,
        *,
        at_ms: int,
        partition: int = 0,
        key: bytes | None,
        topic: str = HEARTBEATS,
        log_append: bool = True,
    ) -> Consumed:
        self.offset += 1
        return Consumed(topic, partition, self.offset, key, value, at_ms, log_append)

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
        self.monitor.on_heartbeat(msg)
        self.collect()

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
        record = self.monitor.tick_record()
        record["owner"] = sender
        record["envelope"]["event_time"] = sent_wall_ms or self.wall_ms
        self.feed(encode("Heartbeat", record), at_ms=at_ms, partition=partition, key=b"")

    def timeline_raw(self, value: bytes) -> None:
        msg = self.message(value, at_ms=0, key=b"t1", topic="lakewarden.timeline")
        self.monitor.on_timeline(msg)
        self.collect()

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
        self.timeline_raw(encode("TimelineTransition", record))

    def record(self, instant: str = INSTANT) -> LivenessRecord | None:
        raw = self.table.get(record_key("t1", instant))
        return None if raw is None else LivenessRecord.decode(raw, key=("t1", instant))


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
    harness.monitor.assigned([0, 1], {})
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
    h.monitor.assigned(
        [0],
        {
            record_key("t1", INSTANT): alive.encode("t1", INSTANT),
            record_key("t1", "20250314092653590"): dead.encode("t1", "20250314092653590"),
            b"not json": b"neither",
        },
    )

    h.tick(100_000)
    h.tick(101_500)
    assert h.sent == []
    h.tick(101_501)
    assert [e["instant"] for e in h.sent] == [INSTANT]


def test_json_records_of_the_format_before_the_schema_are_rewritten_in_avro() -> None:
    """An upgrade: the changelog holds JSON records; the monitor judges them as before and
    rewrites each in Avro (behind the JSON one), so readers, which refuse JSON, see it."""
    h = Harness()
    legacy = (
        b'{"status":"alive","owner":"w1","partition":0,"last_seen_ms":1000,'
        b'"tolerance_ms":1500,"since_ms":1000}'
    )
    key = record_key("t1", INSTANT)
    before = metrics.MIGRATED._value.get()
    h.monitor.assigned([0], {key: legacy})
    rewritten = h.table[key]
    assert rewritten[:2] == b"\xc3\x01"  # Avro single-object encoding
    assert LivenessRecord.decode(rewritten, key=("t1", INSTANT)) == LivenessRecord(
        "alive", "w1", 0, 1_000, 1_500, 1_000
    )
    assert metrics.MIGRATED._value.get() == before + 1
    h.tick(100_000)
    h.tick(101_501)  # judged from the migrated record: declared dead
    assert [e["instant"] for e in h.sent] == [INSTANT]
    assert (0, key, False) in [(p, k, v is None) for p, k, v in h.changelog]


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
    assert h.letters == [(reason, HEARTBEATS)]
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
    assert h.letters == [(reason, HEARTBEATS)]
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
    h.timeline_raw(encode("Heartbeat", heartbeat()))
    h.timeline_raw(b"\x00not an event at all")
    assert h.letters == [
        ("unexpected_event", HEARTBEATS),
        ("unexpected_event", "lakewarden.timeline"),
        ("bad_magic", "lakewarden.timeline"),
    ]


def test_changelog_writes_go_to_the_partition_of_the_instant(h: Harness) -> None:
    h.tick(0, partition=1)  # grace over on partition 1 too
    h.beat(1_000, partition=1)
    h.timeline("completed")
    h.tick(1_100, partition=1)
    key = record_key("t1", INSTANT)
    assert [(p, k, v is None) for p, k, v in h.changelog] == [(1, key, False), (1, key, True)]


def test_revoked_partitions_drop_their_records(h: Harness) -> None:
    h.beat(1_000, partition=0)
    h.beat(1_000, partition=1, instant="20250314092653590")
    h.monitor.revoked([1])
    assert h.record() is not None and h.record("20250314092653590") is None
    assert len(h.tracker) == 1


def test_producer_stamped_messages_are_judged_by_the_monitor_clock(h: Harness) -> None:
    before = metrics.CREATE_TIME._value.get()
    record = heartbeat()
    h.feed(encode("Heartbeat", record), at_ms=1, log_append=False)  # a writer's clock: ignored
    assert h.record().last_seen_ms == h.wall_ms  # type: ignore[union-attr]
    assert metrics.CREATE_TIME._value.get() == before + 1


class _Closable:
    """A consumer or producer stand-in for ``Worker._close``: nothing left to flush or commit."""

    def flush(self, timeout: float | None = None) -> int:
        return 0

    def commit(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_closed_worker_gives_up_its_partitions_so_a_rebuilt_one_starts_clean(
    h: Harness,
) -> None:
    """The monitor outlives its worker (the service's ``app``); a worker closed after its
    consumer failed fatally got no revocation, so without this the loop built again after it
    would judge the dead loop's instants and records."""
    from confluent_kafka import TopicPartition

    from lakewarden.settings import KafkaSettings, Settings
    from lakewarden_services.heartbeat_monitor.loop import Topics, Worker

    names = {k: k for k in ("heartbeats", "timeline", "expired", "dlq", "changelog")}
    topics = Topics(**names, partitions=2, expired_partitions=2)
    unreachable = Settings(kafka=KafkaSettings(bootstrap_servers="127.0.0.1:1"))
    worker = Worker(unreachable, h.monitor, topics, group=Group("g"), tick_s=1)
    worker.consumer.close()
    worker.producer.flush(0)
    worker.consumer = worker.producer = _Closable()  # type: ignore[assignment]
    worker._recover = lambda partitions: {}  # type: ignore[method-assign]
    worker._on_assign([TopicPartition("heartbeats", 0), TopicPartition("heartbeats", 1)])
    h.beat(1_000, partition=0)
    h.beat(1_000, partition=1, instant="20250314092653590")
    assert len(h.tracker) == 2 and h.table

    worker._close()
    assert len(h.tracker) == 0 and h.table == {}
    assert h.tracker.partitions_in_grace() == 0
