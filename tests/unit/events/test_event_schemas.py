"""The event contract in schemas/: envelope, RFC-20 ErrorRecord, frozen history, compatibility."""

from __future__ import annotations

import json
import shutil
from io import BytesIO
from pathlib import Path

import pytest
from _hypothesis_profiles import examples
from fastavro import schemaless_reader, schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakewarden.errors import ConfigurationError
from lakewarden.events import default_codec, sample_events, topic_for_event
from lakewarden.events._schemas import (
    HISTORY_DIR,
    EventSchema,
    default_schema_dir,
    history_file_name,
    load_schema_set,
)
from lakewarden.events.strategies import avro_values

SCHEMA_DIR = default_schema_dir()
SCHEMAS = load_schema_set(SCHEMA_DIR)
HISTORY = sorted(
    (s for s in SCHEMAS.by_fingerprint.values() if s.name in SCHEMAS.current),
    key=history_file_name,
)

EXPECTED_EVENTS = {
    "LockRequest",
    "LockReply",
    "Heartbeat",
    "HeartbeatExpired",
    "TimelineTransition",
    "TaskManifest",
    "JobCommitRequest",
    "JobCommitResult",
    "ErrorRecord",
    "CancelRequest",
    "CancelResult",
    "CleanRequest",
    "DeadLetter",
    "LivenessRecord",
}


def test_every_architecture_event_has_a_schema() -> None:
    assert set(SCHEMAS.current) == EXPECTED_EVENTS


def test_envelope_fields() -> None:
    envelope = json.loads((SCHEMA_DIR / "Envelope.avsc").read_text())
    fields = {f["name"]: f["type"] for f in envelope["fields"]}
    assert fields == {
        "event_id": "string",
        "event_time": {"type": "long", "logicalType": "timestamp-millis"},
        "table_id": "string",
        "producer_id": "string",
        "schema_version": "int",
    }


@pytest.mark.parametrize("name", sorted(EXPECTED_EVENTS))
def test_every_event_starts_with_the_shared_envelope(name: str) -> None:
    raw = json.loads((SCHEMA_DIR / f"{name}.avsc").read_text())
    first = raw["fields"][0]
    assert (first["name"], first["type"]) == ("envelope", "lakewarden.Envelope")
    assert raw["namespace"] == "lakewarden" and raw["name"] == name
    assert SCHEMAS.current[name].version == raw["version"]


def test_error_record_carries_rfc20_fields_exactly() -> None:
    # RFC-20 (seeds/rfc-20-error-table.txt), field for field: names, order, types, defaults.
    rfc20 = [
        {"name": "uid", "type": "string"},
        {"name": "ts", "type": "string"},
        {"name": "schema", "type": ["null", "string"], "default": None},
        {"name": "record", "type": ["null", "string"], "default": None},
        {"name": "message", "type": ["null", "string"], "default": None},
        {
            "name": "context",
            "type": ["null", {"type": "map", "values": "string"}],
            "default": None,
        },
    ]
    raw = json.loads((SCHEMA_DIR / "ErrorRecord.avsc").read_text())
    ours = [{k: v for k, v in f.items() if k != "doc"} for f in raw["fields"][1:]]
    assert ours == rfc20


@pytest.mark.parametrize("name", sorted(EXPECTED_EVENTS))
def test_every_event_has_a_topic_and_a_sample(name: str) -> None:
    assert name in topic_for_event(name).events
    assert default_codec().encode(name, sample_events()[name])


@pytest.mark.parametrize("name", sorted(EXPECTED_EVENTS))
def test_every_current_schema_is_frozen_in_history(name: str) -> None:
    schema = SCHEMAS.current[name]
    frozen = SCHEMA_DIR / HISTORY_DIR / history_file_name(schema)
    assert frozen.is_file(), (
        f"{name} changed without freezing it. Help: run `python -m lakewarden.events freeze` "
        "and commit the new file in schemas/history/."
    )


@pytest.mark.parametrize("writer", HISTORY, ids=history_file_name)
@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_history_schema_is_readable_by_the_current_one(
    writer: EventSchema, data: st.DataObject
) -> None:
    """Backward compatibility: whatever a past writer wrote, the current reader resolves."""
    record = data.draw(avro_values(writer.parsed))
    buffer = BytesIO()
    schemaless_writer(buffer, writer.parsed, record)
    buffer.seek(0)
    current = SCHEMAS.current[writer.name].parsed
    decoded = schemaless_reader(buffer, writer.parsed, current)
    assert isinstance(decoded, dict)
    assert decoded["envelope"] == record["envelope"]


# -- loader errors ---------------------------------------------------------------------------


@pytest.fixture
def schema_copy(tmp_path: Path) -> Path:
    target = tmp_path / "schemas"
    shutil.copytree(SCHEMA_DIR, target)
    return target


def test_event_without_envelope_is_rejected(schema_copy: Path) -> None:
    (schema_copy / "Bad.avsc").write_text(
        json.dumps(
            {
                "type": "record",
                "name": "Bad",
                "version": 1,
                "fields": [{"name": "x", "type": "int"}],
            }
        )
    )
    with pytest.raises(ConfigurationError, match="first field is `envelope`"):
        load_schema_set(schema_copy)


def test_event_without_version_is_rejected(schema_copy: Path) -> None:
    raw = json.loads((schema_copy / "Heartbeat.avsc").read_text())
    del raw["version"]
    (schema_copy / "Heartbeat.avsc").write_text(json.dumps(raw))
    with pytest.raises(ConfigurationError, match="`version` must be an integer"):
        load_schema_set(schema_copy)


def test_invalid_avro_is_rejected_with_the_file_name(schema_copy: Path) -> None:
    (schema_copy / "Broken.avsc").write_text('{"type": "record", "name": "Broken"')
    with pytest.raises(ConfigurationError, match="Broken.avsc: cannot read schema"):
        load_schema_set(schema_copy)


def test_edited_history_file_is_rejected(schema_copy: Path) -> None:
    path = next((schema_copy / HISTORY_DIR).glob("Heartbeat.v1.*.avsc"))
    raw = json.loads(path.read_text())
    raw["fields"].append({"name": "sneaky", "type": "int"})
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigurationError, match="does not match its name"):
        load_schema_set(schema_copy)


def test_missing_schema_dir_says_how_to_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAKEWARDEN_SCHEMA_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(ConfigurationError, match="No event schemas at .*nowhere.*Help:"):
        default_schema_dir()
