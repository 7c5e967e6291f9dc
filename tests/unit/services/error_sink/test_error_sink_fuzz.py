"""Fuzzing error-sink's consume step (issue 17): damaged ``errors`` messages (bit flips,
truncation, another fingerprint, valid encodings with absurd values: empty or 1 MB strings,
NUL, ``..``) are dead-lettered or buffered (a repeated uid is one record), never raised; the
sink's check that follows (deciding buffered records from storage) never raises either, and a
good record right after is buffered.

The sink runs without a broker: its consumer's dead-letter and watermark calls are replaced
by in-memory fakes (``decode`` is the real one). The real-broker half is
``tests/integration/error_sink``'s bad-event test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _error_sink_messages import TOPIC, FakeMessage
from _hypothesis_profiles import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakewarden.errortable.records import error_record
from lakewarden.events import Rejection, encode
from lakewarden.events.strategies import damaged_messages
from lakewarden.settings import KafkaSettings, Settings
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden_services.error_sink.sink import ErrorSink, SinkOptions

pytestmark = pytest.mark.hypothesis


class Harness:
    def __init__(self, state_dir: Path) -> None:
        settings_ = Settings(
            kafka=KafkaSettings(bootstrap_servers="127.0.0.1:1"), state_dir=state_dir
        )
        options = SinkOptions(
            errors_topic=TOPIC, dlq_topic="lakewarden.dlq", group_id="g", hints=False
        )
        self.sink = ErrorSink(settings_, options, coordinator=EmbeddedCoordinator())
        self.letters: list[Rejection] = []
        consumer: Any = self.sink.consumer
        consumer.dead_letter = lambda msg, why: self.letters.append(Rejection.of(why))
        consumer.watermarks = lambda topic, partition, timeout_s: (0, 10**6)
        self.offset = 0

    def feed(self, value: bytes) -> None:
        self.sink._handle(FakeMessage(value, self.offset))  # type: ignore[arg-type]
        self.offset += 1

    def close(self) -> None:
        self.sink.consumer.close()


def good_record(table_dir: Path, n: int) -> dict[str, Any]:
    return error_record(
        table_id="t",
        producer_id="fuzz",
        record={"id": n},
        schema=None,
        message="bad value",
        context={
            "commitTime": "20260101000000000",
            "tableName": "orders",
            "tableId": "t",
            "tableUri": str(table_dir / "orders"),
            "taskAttempt": "attempt_j_000000_0",
        },
    )


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Any:
    h = Harness(tmp_path_factory.mktemp("error-sink-fuzz"))
    yield h
    h.close()


@settings(max_examples=examples(60), suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_error_records_are_dead_lettered_or_buffered(
    data: st.DataObject, harness: Harness, tmp_path_factory: pytest.TempPathFactory
) -> None:
    h = harness
    table_dir = Path(h.sink.settings.state_dir)
    value = data.draw(damaged_messages("ErrorRecord", good_record(table_dir, h.offset)))
    h.feed(value)  # dead-lettered, buffered, or a duplicate of a buffered uid: never raised
    assert all(letter.reason for letter in h.letters)
    h.sink.check()  # deciding from storage never raises (a missing table is only pending)
    before = len(h.sink.buffer)
    h.feed(encode("ErrorRecord", good_record(table_dir, h.offset)))
    assert len(h.sink.buffer) == before + 1
