"""A writer whose heartbeats cannot reach Kafka refuses to complete its instant.

The broker is one of this test's own (stopping the session's would hurt other tests).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hbtools import INTERVAL_S, MISSES, Writer, spawn, wait_for_beats

from lakewarden.devstack import KafkaBroker
from lakewarden.devstack.processes import free_port
from lakewarden.events import ensure_topics
from lakewarden.events.topics import HEARTBEATS
from lakewarden.settings import KafkaSettings, Settings


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(home=tmp_path / "kafka", port=free_port(), controller_port=free_port())
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def test_writer_refuses_to_complete_when_its_heartbeats_cannot_reach_kafka(
    own_broker: KafkaBroker, kafka_settings: Settings, tmp_path: Path, writers: list[Writer]
) -> None:
    settings = Settings(kafka=KafkaSettings(bootstrap_servers=own_broker.bootstrap))
    ensure_topics(settings, specs=[HEARTBEATS])
    cut_off = spawn(writers, settings, "write", str(tmp_path / "t1"), str(INTERVAL_S), str(MISSES))
    cut_off.expect("ready")

    own_broker.stop()
    cut_off.send("until lost")  # its own verdict, not a guessed window
    cut_off.expect("lost", timeout_s=30)
    cut_off.send("complete now")

    assert cut_off.expect("refused", timeout_s=30) == "refused window_passed HeartbeatLostError"
    assert cut_off.expect("state") == "state inflight"  # the instant did not complete


def test_writer_with_a_healthy_heartbeat_completes(
    hb_settings: Settings, tmp_path: Path, writers: list[Writer]
) -> None:
    writer = spawn(
        writers, hb_settings, "write", str(tmp_path / "t2"), str(INTERVAL_S), str(MISSES)
    )
    instant = writer.expect("ready").split()[1]
    # Longer than a tolerance window of the writer's own clock, with every beat delivered: its
    # beats go out an interval apart at the earliest, so beat MISSES + 2 on the topic was sent
    # (MISSES + 1) intervals after the first, as long as the other writer waited.
    wait_for_beats(hb_settings, instant, MISSES + 2)
    writer.send("complete now")
    assert writer.expect("completed", timeout_s=30) == "completed"
    assert writer.expect("state") == "state completed"
