"""A poison ``ErrorRecord`` (issue 17, reliab item 1): a well-formed record whose table does
not exist, or whose instant never reaches the timeline, used to stay pending forever and pin
error-sink's committed offset. Now it is dead-lettered, byte for byte, once its instant was
not found on ``give_up_after_checks`` checks spanning ``give_up_after_s`` on the sink's clock.

No broker: the sink's consumer's dead-letter and watermark calls are in-memory fakes; the
real-broker half is ``tests/integration/error_sink/test_poison_error_record.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _error_sink_messages import TOPIC, FakeMessage

from lakewarden.errortable import SourceKey
from lakewarden.errortable.records import COMMIT_TIME, TABLE_URI
from lakewarden.errortable.testing import FakeWrite
from lakewarden.events import Rejection, encode
from lakewarden.events.consumer import HeldMessage
from lakewarden.settings import KafkaSettings, Settings
from lakewarden.table import EmbeddedCoordinator, Table
from lakewarden.testing import ManualClock
from lakewarden_services.error_sink.poison import GIVE_UP_REASON, UnresolvedSources
from lakewarden_services.error_sink.sink import ErrorSink, SinkOptions

SCHEMA = pa.schema([pa.field("id", pa.string(), nullable=False)])
KEY = SourceKey("t", "20260101000000000")


class Harness:
    """An ``ErrorSink`` on a manual clock whose dead letters land in lists."""

    def __init__(self, state_dir: Path) -> None:
        self.clock = ManualClock()
        settings = Settings(
            kafka=KafkaSettings(bootstrap_servers="127.0.0.1:1"), state_dir=state_dir
        )
        options = SinkOptions(
            errors_topic=TOPIC,
            dlq_topic="lakewarden.dlq",
            group_id="g",
            give_up_after_s=60.0,
            give_up_after_checks=3,
            hints=False,
        )
        self.sink = ErrorSink(
            settings, options, coordinator=EmbeddedCoordinator(), clock=self.clock
        )
        self.sink._assigned = {0}
        self.held: list[tuple[HeldMessage, Rejection]] = []
        self.live: list[tuple[bytes, Rejection]] = []
        consumer: Any = self.sink.consumer
        consumer.dead_letter_held = lambda msg, why: self.held.append((msg, why))
        consumer.dead_letter = lambda msg, why: self.live.append((msg.value(), why))
        consumer.watermarks = lambda topic, partition, timeout_s: (0, 0)
        self.offset = 0

    def feed(self, event: dict[str, Any]) -> bytes:
        value = encode("ErrorRecord", event)
        self.sink._handle(FakeMessage(value, self.offset))  # type: ignore[arg-type]
        self.offset += 1
        return value

    def checks(self, n: int, *, every_s: float) -> None:
        for _ in range(n):
            self.clock.advance(every_s)
            self.sink.check()


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path / "state")
    yield h
    h.sink.consumer.close()


@pytest.fixture
def write(tmp_path: Path) -> FakeWrite:
    table = Table.create(str(tmp_path / "orders"), name="orders", record_key="id", schema=SCHEMA)
    return FakeWrite(table)


def poisoned(write: FakeWrite, keys: list[str], **context: str) -> list[dict[str, Any]]:
    events = write.errors(write.attempt(0), keys)
    for event in events:
        event["context"] = {**event["context"], **context}
    return events


def test_unresolved_sources_give_up_only_after_both_bounds() -> None:
    clock = ManualClock()
    sources = UnresolvedSources(after_s=60.0, after_checks=3, clock=clock)
    assert sources.note(KEY, "absent") is None  # check 1 at t=0
    clock.advance(100.0)
    assert sources.note(KEY, "absent") is None, "old enough, but only 2 checks"
    verdict = sources.note(KEY, "absent")
    assert verdict is not None and verdict.key == KEY
    assert "3 checks over 100 s" in verdict.detail and "absent" in verdict.detail

    quick = SourceKey("t", "20260101000000001")
    for _ in range(10):
        assert sources.note(quick, "absent") is None, "many checks, but younger than 60 s"
    sources.resolved(quick)
    clock.advance(60.0)
    assert sources.note(quick, "absent") is None, "found meanwhile: the age starts again"
    sources.keep([KEY])
    assert len(sources) == 1


def test_poison_error_record_of_a_missing_table_is_dead_lettered_and_offsets_move(
    harness: Harness, write: FakeWrite, tmp_path: Path
) -> None:
    events = poisoned(write, ["a", "b"], **{TABLE_URI: str(tmp_path / "no-such-table")})
    originals = [harness.feed(e) for e in events]
    harness.checks(2, every_s=100.0)
    assert harness.held == [], "two checks are not enough"
    assert harness.sink.buffer.committable_offsets() == {0: 0}, "pinned while held"

    harness.checks(1, every_s=1.0)
    assert sorted(m.value for m, _ in harness.held) == sorted(originals)
    assert [(m.topic, m.partition) for m, _ in harness.held] == [(TOPIC, 0)] * 2
    reasons = {why.reason for _, why in harness.held}
    assert reasons == {GIVE_UP_REASON}
    detail = harness.held[0][1].detail
    assert write.instant in detail and "no-such-table" in detail
    assert len(harness.sink.buffer) == 0
    assert harness.sink.buffer.committable_offsets() == {0: 2}, "the offset moved past it"

    # A later record of the same key (a retried task) goes to the DLQ too, never dropped.
    late = harness.feed(events[0])
    assert harness.live == [(late, harness.held[0][1])]
    assert harness.sink.buffer.committable_offsets() == {0: 3}


def test_poison_error_record_of_an_instant_never_on_the_timeline_is_dead_lettered(
    harness: Harness, write: FakeWrite
) -> None:
    harness.feed(poisoned(write, ["a"], **{COMMIT_TIME: "20991231235959999"})[0])
    harness.checks(3, every_s=30.0)
    (letter,) = harness.held
    assert "20991231235959999" in letter[1].detail
    assert "not on the timeline" in letter[1].detail


def test_records_of_an_instant_still_inflight_are_never_given_up_on(
    harness: Harness, write: FakeWrite
) -> None:
    """A long Spark job is legitimate: its instant is on the timeline, only pending."""
    harness.feed(write.errors(write.attempt(0), ["a"])[0])
    harness.checks(10, every_s=1_000.0)
    assert harness.held == []
    assert len(harness.sink.buffer) == 1
