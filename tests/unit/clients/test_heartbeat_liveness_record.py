"""The liveness changelog contract (keys, records, verdicts) and the view without a broker."""

from __future__ import annotations

import pytest

from lakewarden.clients.liveness import (
    LIVENESS_CHANGELOG,
    Liveness,
    LivenessDecodeError,
    LivenessRecord,
    liveness_topic,
    parse_key,
    record_key,
)
from lakewarden.errors import ConfigurationError
from lakewarden.events import decode, encode
from lakewarden.events.dlq import Rejection
from lakewarden.events.samples import sample_events
from lakewarden.settings import KafkaSettings, Settings
from lakewarden.table.coordinator import Liveness as Verdict

INSTANT = "20250314092653589"


def test_keys_round_trip_any_table_id() -> None:
    for table_id in ("orders", "a/b", 'quote"d', "ünïcode", ""):
        assert parse_key(record_key(table_id, "20250314092653589")) == (
            table_id,
            "20250314092653589",
        )
    assert record_key("t", "1") == b'["t","1"]'


@pytest.mark.parametrize("key", [b"", b"[]", b'["only one"]', b'{"t": 1}', b"[1, 2]"])
def test_keys_that_are_not_record_keys_are_refused(key: bytes) -> None:
    with pytest.raises(ValueError):
        parse_key(key)


@pytest.mark.parametrize(
    ("status", "verdict"),
    [("alive", Verdict.ALIVE), ("dead", Verdict.DEAD), ("ended", Verdict.DEAD)],
)
def test_records_round_trip_and_map_to_verdicts(status: str, verdict: Verdict) -> None:
    record = LivenessRecord(status, "w1", 3, 1_000, 1_500, 2_600)  # type: ignore[arg-type]
    data = record.encode("t", INSTANT)
    assert data[:2] == b"\xc3\x01"  # an Avro event like every other
    assert decode(data).name == "LivenessRecord"
    assert LivenessRecord.decode(data, key=("t", INSTANT)) == record
    assert record.verdict is verdict


LEGACY = (
    b'{"status":"alive","owner":"w1","partition":3,"last_seen_ms":1000,'
    b'"tolerance_ms":1500,"since_ms":2600}'
)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (LEGACY, "legacy_json"),
        (b"not an avro event at all", "bad_magic"),
        (b"\xc3\x01" + b"\x00" * 8 + b"x", "unknown_fingerprint"),
    ],
)
def test_values_that_are_not_records_are_refused(data: bytes, reason: str) -> None:
    with pytest.raises(LivenessDecodeError) as info:
        LivenessRecord.decode(data)
    assert info.value.reason == reason


def test_a_record_of_another_instant_or_another_event_is_refused() -> None:
    data = LivenessRecord("dead", "w1", 3, 1_000, 1_500, 2_600).encode("t", INSTANT)
    with pytest.raises(LivenessDecodeError, match="key_mismatch"):
        LivenessRecord.decode(data, key=("t", "20250314092653590"))
    other = encode("HeartbeatExpired", sample_events()["HeartbeatExpired"])
    with pytest.raises(LivenessDecodeError, match="unexpected_event"):
        LivenessRecord.decode(other)


def test_the_monitor_alone_reads_the_json_format_before_the_schema() -> None:
    assert LivenessRecord.decode_legacy(LEGACY) == LivenessRecord(
        "alive", "w1", 3, 1_000, 1_500, 2_600
    )


class _Message:
    def __init__(self, key: bytes, value: bytes | None) -> None:
        self._key, self._value = key, value

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes | None:
        return self._value


class _Consumer:
    def __init__(self) -> None:
        self.dead: list[tuple[_Message, Rejection]] = []

    def dead_letter(self, msg: _Message, why: Rejection) -> None:
        self.dead.append((msg, why))


def test_the_view_applies_records_and_refuses_what_it_cannot_decode() -> None:
    """A refused value is not applied (the instant keeps what it had, or reads UNKNOWN) and
    goes to the DLQ; JSON of the format before the schema is refused and counted only."""
    view = Liveness(Settings(kafka=KafkaSettings()))
    consumer = _Consumer()
    key = record_key("t", INSTANT)
    alive = LivenessRecord("alive", "w1", 3, 1_000, 1_500, 1_000)
    for value in (alive.encode("t", INSTANT), b"not an avro event at all", LEGACY):
        view._apply(consumer, _Message(key, value))  # type: ignore[arg-type]
    assert view._records == {("t", INSTANT): alive}
    assert [why.reason for _, why in consumer.dead] == ["bad_magic"]
    assert (view.skipped, view.legacy) == (2, 1)
    other = alive.encode("t", "20250314092653590")
    view._apply(consumer, _Message(key, other))  # type: ignore[arg-type]
    assert consumer.dead[-1][1].reason == "key_mismatch"
    view._apply(consumer, _Message(key, None))  # type: ignore[arg-type]
    assert view._records == {}


def test_topic_is_compacted_and_partitioned_like_heartbeats() -> None:
    settings = Settings(kafka=KafkaSettings(topic_prefix="x."))
    assert liveness_topic(settings) == "x.heartbeat-monitor-liveness-changelog"
    assert LIVENESS_CHANGELOG.cleanup_policy == "compact"
    assert LIVENESS_CHANGELOG.partitions == 6


def test_view_without_kafka_says_how_to_configure_it() -> None:
    view = Liveness(Settings(kafka=KafkaSettings()))
    with pytest.raises(ConfigurationError, match="LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS"):
        view.status("t", "20250314092653589")
    view.close()
