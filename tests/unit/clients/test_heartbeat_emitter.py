"""The Heartbeat emitter with a fake producer: health, stickiness, a dying thread, no broker.

Timing is checked on a ``ManualClock`` the tests move themselves, never against the wall
clock: "lost exactly when the tolerance has passed" holds on any machine, however loaded.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

import lakewarden.events.producer as producer_module
from lakewarden.clients.heartbeat import Heartbeat, HeartbeatLostError, Heartbeats
from lakewarden.events import decode
from lakewarden.settings import HeartbeatPolicy, HeartbeatSettings, KafkaSettings, Settings
from lakewarden.testing import ManualClock, wait_until

INSTANT = "20250314092653589"
FAST = {"interval_s": 0.05, "tolerable_misses": 3}  # tolerance 0.15 s


class FakeProducer:
    """Acknowledges every produced message on the next poll, unless told not to."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.records: list[dict[str, Any]] = []
        self.pending: list[Any] = []
        self.acks = True
        self.fail: BaseException | None = None
        self.flushes = 0
        self.listed: list[str] = []
        self.lock = threading.Lock()
        PRODUCERS.append(self)

    def produce(self, topic: str, value: bytes, *, key: bytes, on_delivery: Any) -> None:
        if self.fail is not None:
            raise self.fail
        assert topic.endswith("heartbeats") and key == b"t1"
        with self.lock:
            self.records.append(decode(value).record)
            self.pending.append(on_delivery)

    def poll(self, timeout: float) -> int:
        with self.lock:
            callbacks, self.pending = (self.pending, []) if self.acks else ([], self.pending)
        for callback in callbacks:
            callback(None, None)
        return len(callbacks)

    def flush(self, timeout: float) -> int:
        self.flushes += 1
        self.poll(0)
        return len(self.pending)

    def list_topics(self, topic: str, timeout: float) -> None:
        self.listed.append(topic)


PRODUCERS: list[FakeProducer] = []


@pytest.fixture(autouse=True)
def fake_producer(monkeypatch: pytest.MonkeyPatch) -> None:
    PRODUCERS.clear()
    monkeypatch.setattr(producer_module, "Producer", FakeProducer)


@pytest.fixture
def settings() -> Settings:
    return Settings(kafka=KafkaSettings(bootstrap_servers="127.0.0.1:9"))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def sent(count: int) -> Any:
    """A condition: the fake producer has received ``count`` beats."""
    return lambda: len(PRODUCERS[0].records) >= count


def test_beats_every_interval_and_sends_a_final_beat(
    settings: Settings, clock: ManualClock
) -> None:
    with Heartbeat(settings, "t1", INSTANT, "w1", clock=clock, **FAST) as beat:  # type: ignore[arg-type]
        assert len(PRODUCERS[0].records) == 1  # the first beat, acknowledged before start returns
        for n in range(2, 8):  # six intervals: one beat each, no more
            clock.advance(0.05)
            wait_until(sent(n), what=f"beat {n}")
        assert beat.is_healthy()
        beat.check()
    records = PRODUCERS[0].records
    assert len(records) == 8  # 7 beats and the final one
    assert [r["seq"] for r in records] == list(range(len(records)))
    assert {r["kind"] for r in records[:-1]} == {"beat"} and records[-1]["kind"] == "final"
    first = records[0]
    assert (first["instant"], first["owner"], first["envelope"]["table_id"]) == (
        INSTANT,
        "w1",
        "t1",
    )
    assert (first["interval_ms"], first["tolerable_misses"]) == (50, 3)


def test_policy_comes_from_the_table_override_in_settings() -> None:
    settings = Settings(
        kafka=KafkaSettings(bootstrap_servers="127.0.0.1:9"),
        heartbeat=HeartbeatSettings(
            interval_s=7, tables={"t1": HeartbeatPolicy(interval_s=2, tolerable_misses=5)}
        ),
    )
    assert Heartbeat(settings, "t1", INSTANT, "w").tolerance_s == 10
    assert Heartbeat(settings, "t2", INSTANT, "w").tolerance_s == 21
    assert Heartbeat(settings, "t1", INSTANT, "w", interval_s=1).tolerance_s == 5


def test_producer_drops_a_beat_it_cannot_deliver_within_an_interval(settings: Settings) -> None:
    config = Heartbeat(settings, "t1", INSTANT, "w", interval_s=3)._librdkafka_config()
    assert config["message.timeout.ms"] == 3000 and config["acks"] == "all"
    fast = Heartbeat(settings, "t1", INSTANT, "w", **FAST)._librdkafka_config()  # type: ignore[arg-type]
    assert fast["message.timeout.ms"] == 1000  # never below 1 s


def test_no_acknowledgement_for_a_tolerance_window_is_lost_for_good(
    settings: Settings, clock: ManualClock
) -> None:
    told: list[HeartbeatLostError] = []
    beat = Heartbeat(settings, "t1", INSTANT, "w1", on_lost=told.append, clock=clock, **FAST)  # type: ignore[arg-type]
    with beat:
        PRODUCERS[0].acks = False  # the broker went away
        for n in range(2, 5):  # three beats sent, none acknowledged: 0.15 s, the tolerance
            clock.advance(0.05)
            wait_until(sent(n), what=f"beat {n}")
        assert beat.is_healthy()  # a silence of exactly the tolerance is still within it
        clock.advance(0.001)
        assert not beat.is_healthy()  # ... and a moment more is not
        with pytest.raises(HeartbeatLostError, match="no heartbeat was delivered") as info:
            beat.check()
        assert (info.value.table, info.value.instant, info.value.cause) == (
            "t1",
            INSTANT,
            "window_passed",
        )
        clock.advance(0.049)  # the thread's next beat: it tells the holder
        wait_until(lambda: len(told) == 1, what="on_lost")
        assert told[0] is info.value

        PRODUCERS[0].acks = True  # back again: still lost (the monitor may have judged)
        delivered = beat.delivered
        clock.advance(0.05)
        wait_until(lambda: beat.delivered > delivered, what="an acknowledged beat")
        assert not beat.is_healthy()
    assert len(told) == 1


def test_a_late_acknowledgement_after_a_long_gap_is_still_a_lost_window(
    settings: Settings, clock: ManualClock
) -> None:
    beat = Heartbeat(settings, "t1", INSTANT, "w1", clock=clock, **FAST)  # type: ignore[arg-type]
    beat._started_at = clock.monotonic()
    beat._thread = threading.current_thread()  # judged as if running
    beat._on_delivery(None, beat._started_at + 0.01)
    assert beat.is_healthy()
    beat._on_delivery(None, beat._started_at + 0.01 + 0.2)  # sent 0.2 s after the previous ack
    assert not beat.is_healthy()


def test_a_dying_thread_tells_the_holder_at_once(settings: Settings) -> None:
    told: list[HeartbeatLostError] = []
    beat = Heartbeat(settings, "t1", INSTANT, "w1", on_lost=told.append, **FAST)  # type: ignore[arg-type]
    with beat:
        PRODUCERS[0].fail = RuntimeError("boom")  # the next beat kills the thread
        wait_until(lambda: bool(told))
        assert not beat.is_healthy()
        with pytest.raises(HeartbeatLostError, match="thread failed: RuntimeError") as info:
            beat.check()
        assert info.value.cause == "thread_failed" and told == [info.value]


def test_a_thread_that_vanished_is_noticed_by_the_holder(
    settings: Settings, clock: ManualClock
) -> None:
    beat = Heartbeat(settings, "t1", INSTANT, "w1", interval_s=60, tolerable_misses=3, clock=clock)
    told: list[HeartbeatLostError] = []
    beat._on_lost = told.append
    beat._started_at = clock.monotonic()
    gone = threading.Thread(target=lambda: None)
    gone.start()
    gone.join()
    beat._thread = gone  # as if killed without running any handler
    assert not beat.is_healthy()
    assert told and told[0].cause == "thread_failed"


def test_first_beat_not_acknowledged_refuses_to_start_after_the_tolerance(
    settings: Settings, clock: ManualClock
) -> None:
    class Mute(FakeProducer):
        def __init__(self, config: dict[str, Any]) -> None:
            super().__init__(config)
            self.acks = False

    producer_module.Producer = Mute  # type: ignore[misc]  (undone by monkeypatch)
    beat = Heartbeat(settings, "t1", INSTANT, "w1", clock=clock, **FAST)  # type: ignore[arg-type]
    refused: list[HeartbeatLostError] = []

    def start() -> None:
        with pytest.raises(HeartbeatLostError, match="first heartbeat") as info:
            beat.start()
        refused.append(info.value)

    starter = threading.Thread(target=start)
    starter.start()
    wait_until(lambda: bool(PRODUCERS) and bool(PRODUCERS[0].records), what="the first beat")
    clock.advance(0.15)  # the tolerance: start() gives up now, however slow the machine
    starter.join(10)
    assert not starter.is_alive() and refused and refused[0].cause == "first_beat"


def test_start_returns_as_soon_as_the_first_beat_is_acknowledged(
    settings: Settings, clock: ManualClock
) -> None:
    """The broker's acknowledgement arrives after the thread's first poll: the thread polls
    again within milliseconds, not at its 100 ms tick (every micro-batch paid that tick)."""

    class Remote(FakeProducer):
        polls = 0

        def poll(self, timeout: float) -> int:
            self.polls += 1
            return super().poll(timeout) if self.polls > 1 else 0

    producer_module.Producer = Remote  # type: ignore[misc]  (undone by monkeypatch)
    beat = Heartbeat(settings, "t1", INSTANT, "w1", interval_s=1, tolerable_misses=3, clock=clock)
    started = threading.Event()

    def start() -> None:
        beat.start()
        started.set()

    starter = threading.Thread(target=start)
    starter.start()
    try:
        wait_until(lambda: bool(PRODUCERS) and bool(PRODUCERS[0].records), what="the first beat")
        clock.advance(0.005)  # well before the thread's longest sleep (0.1 s)
        wait_until(started.is_set, timeout_s=5, what="start() after the acknowledgement")
    finally:
        clock.advance(1.0)  # let a start() that missed it return, so the test can end
        starter.join(10)
        beat.stop()


def test_heartbeats_holder_checks_the_instant_it_beats_for(settings: Settings) -> None:
    beats = Heartbeats(settings, **FAST)
    beats.check("t1", INSTANT)  # nothing held: nothing to judge
    with beats.hold("t1", INSTANT, "w1") as beat:
        assert beats.get("t1", INSTANT) is beat
        with pytest.raises(RuntimeError, match="already beating"):
            with beats.hold("t1", INSTANT, "w1"):
                pass
        beats.check("t1", INSTANT)
        PRODUCERS[0].acks = False
        wait_until(lambda: not beat.is_healthy())
        with pytest.raises(HeartbeatLostError):
            beats.check("t1", INSTANT)
    assert beats.get("t1", INSTANT) is None
    beats.check("t1", INSTANT)


def test_heartbeats_share_one_producer_and_prove_each_instant_alive(settings: Settings) -> None:
    """Instants beaten one after another (a streaming query's micro-batches) go through one
    producer, made once; each still has its first beat acknowledged before its block runs,
    its own beats while it runs, and a final beat when it ends."""
    beats = Heartbeats(settings, **FAST)
    instants = ["20250314092653589", "20250314092654001", "20250314092655002"]
    for instant in instants:
        with beats.hold("t1", instant, "w1") as beat:
            assert beat.delivered >= 1 and beat.is_healthy()
            records = PRODUCERS[0].records
            assert records[-1]["instant"] == instant and records[-1]["kind"] == "beat"
            flushed = PRODUCERS[0].flushes
        # Its final beat was waited for before the block was left: a process may exit next.
        assert PRODUCERS[0].records[-1]["kind"] == "final"
        assert PRODUCERS[0].flushes == flushed + 1
    assert len(PRODUCERS) == 1
    by_instant = {
        i: [r["kind"] for r in PRODUCERS[0].records if r["instant"] == i] for i in instants
    }
    assert all(kinds[0] == "beat" and kinds[-1] == "final" for kinds in by_instant.values())
    beats.close()
    with beats.hold("t1", "20250314092656003", "w1"):
        assert len(PRODUCERS) == 2  # closed: the next hold makes another producer


def test_a_shared_producer_that_stops_acknowledging_loses_the_instant_it_beats_for(
    settings: Settings,
) -> None:
    beats = Heartbeats(settings, **FAST)
    with beats.hold("t1", INSTANT, "w1"):
        pass
    with beats.hold("t1", "20250314092654001", "w1") as beat:
        PRODUCERS[0].acks = False
        wait_until(lambda: not beat.is_healthy())
        with pytest.raises(HeartbeatLostError):
            beats.check("t1", "20250314092654001")


def test_connect_makes_the_producer_the_first_hold_beats_through(settings: Settings) -> None:
    """A streaming task connects on a batch without rows: its first instant then starts no
    producer and waits for no broker metadata."""
    beats = Heartbeats(settings, **FAST)
    beats.connect()
    assert len(PRODUCERS) == 1 and PRODUCERS[0].listed == ["lakewarden.heartbeats"]
    with beats.hold("t1", INSTANT, "w1") as beat:
        assert beat.delivered >= 1
    assert len(PRODUCERS) == 1 and PRODUCERS[0].records[-1]["kind"] == "final"


def test_a_failing_connect_is_logged_and_the_hold_still_beats(
    settings: Settings, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(self: FakeProducer, topic: str, timeout: float) -> None:
        raise KafkaException(KafkaError(KafkaError._TRANSPORT))

    monkeypatch.setattr(FakeProducer, "list_topics", unreachable)
    beats = Heartbeats(settings, **FAST)
    beats.connect()
    assert "heartbeat producer not connected yet" in caplog.text
    with beats.hold("t1", INSTANT, "w1") as beat:
        assert beat.delivered >= 1
