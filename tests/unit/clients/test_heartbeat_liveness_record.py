"""The liveness changelog contract (keys, records, verdicts) and the view without a broker."""

from __future__ import annotations

import pytest

from lakewarden.clients.liveness import (
    LIVENESS_CHANGELOG,
    Liveness,
    LivenessRecord,
    liveness_topic,
    parse_key,
    record_key,
)
from lakewarden.errors import ConfigurationError
from lakewarden.settings import KafkaSettings, Settings
from lakewarden.table.coordinator import Liveness as Verdict


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
    assert LivenessRecord.decode(record.encode()) == record
    assert record.verdict is verdict


@pytest.mark.parametrize(
    "data", [b"not json", b"[]", b'{"status": "zombie"}', b'{"status": "alive"}']
)
def test_values_that_are_not_records_are_refused(data: bytes) -> None:
    with pytest.raises((ValueError, KeyError)):
        LivenessRecord.decode(data)


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
