"""error-sink learns *when* to read storage from events (``timeline``, ``job.results``), and
reads storage, the truth, only then: a pending instant is not polled every check; an event
that says it ended gets it read at the next check; without any event the fallback interval
still reads it (events can be missed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _error_sink_messages import TOPIC, FakeMessage

from lakewarden.errortable import SourceKey
from lakewarden.errortable.testing import FakeWrite
from lakewarden.events import encode, make_event
from lakewarden.settings import KafkaSettings, Settings
from lakewarden.table import EmbeddedCoordinator, Table
from lakewarden.testing import ManualClock
from lakewarden_services.error_sink.hints import hinted_key
from lakewarden_services.error_sink.sink import ErrorSink, SinkOptions

SCHEMA = pa.schema([pa.field("id", pa.string(), nullable=False)])


class _Hints:
    """No broker: the keys a test says ended."""

    failed = False

    def __init__(self) -> None:
        self.ended: set[SourceKey] = set()

    def drain(self) -> set[SourceKey]:
        ended, self.ended = self.ended, set()
        return ended

    def close(self) -> None:
        pass


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[tuple[ErrorSink, _Hints, ManualClock]]:
    clock = ManualClock()
    settings = Settings(
        kafka=KafkaSettings(bootstrap_servers="127.0.0.1:1"), state_dir=tmp_path / "state"
    )
    options = SinkOptions(
        errors_topic=TOPIC, dlq_topic="lakewarden.dlq", group_id="g", fallback_check_s=30.0
    )
    s = ErrorSink(settings, options, coordinator=EmbeddedCoordinator(), clock=clock)
    s._assigned = {0}
    hints = _Hints()
    s.hints = hints  # type: ignore[assignment]
    consumer: Any = s.consumer
    consumer.watermarks = lambda topic, partition, timeout_s: (0, 0)
    yield s, hints, clock
    s.consumer.close()


def test_storage_is_read_when_an_event_says_the_instant_ended(
    sink: tuple[ErrorSink, _Hints, ManualClock], tmp_path: Path
) -> None:
    s, hints, clock = sink
    table = Table.create(str(tmp_path / "orders"), name="orders", record_key="id", schema=SCHEMA)
    write = FakeWrite(table)
    attempt = write.attempt(0)
    for offset, event in enumerate(write.errors(attempt, ["a", "b"])):
        s._handle(FakeMessage(encode("ErrorRecord", event), offset))  # type: ignore[arg-type]
    key = SourceKey(table.table_id, write.instant)

    s.check()  # a new key: read once, still pending
    assert s.storage_reads == 1
    s.check()
    s.check()
    assert s.storage_reads == 1  # pending, and no event says otherwise: not polled

    write.complete([attempt])
    s.check()
    assert s.storage_reads == 1 and s.committed_instants == 0  # nothing said it ended yet
    hints.ended = {key}
    s.check()
    assert s.storage_reads == 2
    errors = Table.open(table.uri + "_errors")
    assert errors.read().num_rows == 2


def test_without_events_the_fallback_interval_still_reads_storage(
    sink: tuple[ErrorSink, _Hints, ManualClock], tmp_path: Path
) -> None:
    s, _, clock = sink
    table = Table.create(str(tmp_path / "trips"), name="trips", record_key="id", schema=SCHEMA)
    write = FakeWrite(table)
    attempt = write.attempt(0)
    [event] = write.errors(attempt, ["t1"])
    s._handle(FakeMessage(encode("ErrorRecord", event), 0))  # type: ignore[arg-type]
    s.check()
    write.complete([attempt])
    clock.advance(29.0)
    s.check()
    assert s.storage_reads == 1
    clock.advance(1.0)
    s.check()  # the fallback: read, completed, committed
    assert s.storage_reads == 2
    assert Table.open(table.uri + "_errors").read().num_rows == 1


def test_events_that_end_an_instant_are_hints_and_others_are_not() -> None:
    def transition(kind: str) -> dict[str, Any]:
        return make_event(
            "TimelineTransition",
            table_id="t",
            producer_id="w",
            seq=1,
            instant="20250101000000000",
            action="commit",
            transition=kind,
            actor="w",
            lock_token=1,
            wall_time=0,
            payload="{}",
        )

    key = SourceKey("t", "20250101000000000")
    for kind in ("completed", "rolled_back", "aborted"):
        assert hinted_key("TimelineTransition", transition(kind)) == key
    for kind in ("requested", "inflight", "cancel_requested"):
        assert hinted_key("TimelineTransition", transition(kind)) is None
    result = {"envelope": {"table_id": "t"}, "instant": "20250101000000000"}
    assert hinted_key("JobCommitResult", result) == key
    assert hinted_key("Heartbeat", result) is None
