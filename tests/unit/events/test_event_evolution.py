"""Schema evolution with a real older/newer pair of schema directories.

v1 is today's Heartbeat; v2 adds ``attempt`` with a default. A reader on v2 (whose history
holds v1, as ``freeze`` leaves it) decodes v1 messages with the default filled in; a reader
still on v1 cannot know v2's fingerprint and says so.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lakewarden.events import EventCodec, EventDecodeError, sample_events
from lakewarden.events._schemas import (
    HISTORY_DIR,
    default_schema_dir,
    freeze,
    load_schema_set,
)


def _schema_dir(tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(default_schema_dir(), target)
    return target


@pytest.fixture
def v1_dir(tmp_path: Path) -> Path:
    return _schema_dir(tmp_path, "v1")


@pytest.fixture
def v2_dir(tmp_path: Path) -> Path:
    target = _schema_dir(tmp_path, "v2")
    path = target / "Heartbeat.avsc"
    raw = json.loads(path.read_text())
    raw["version"] += 1  # whatever the current version is, the copy is the next one
    raw["fields"].append({"name": "attempt", "type": "int", "default": 0})
    path.write_text(json.dumps(raw, indent=2))
    freeze(load_schema_set(target))
    return target


def test_newer_reader_decodes_older_writer_with_defaults(v1_dir: Path, v2_dir: Path) -> None:
    old = EventCodec(load_schema_set(v1_dir))
    new = EventCodec(load_schema_set(v2_dir))
    record = sample_events(codec=old)["Heartbeat"]
    data = old.encode("Heartbeat", record)
    assert data[2:10] != new.schema("Heartbeat").fingerprint

    name, decoded = new.decode(data)

    assert name == "Heartbeat"
    assert decoded["attempt"] == 0
    assert decoded["seq"] == record["seq"] and decoded["owner"] == record["owner"]
    assert decoded["envelope"]["schema_version"] == old.schema("Heartbeat").version
    assert new.decode_envelope(data)[1]["event_id"] == record["envelope"]["event_id"]


def test_newer_writer_is_versioned_and_round_trips(v2_dir: Path) -> None:
    new = EventCodec(load_schema_set(v2_dir))
    record = {**sample_events(codec=new)["Heartbeat"], "attempt": 3}
    assert record["envelope"]["schema_version"] == new.schema("Heartbeat").version
    assert new.decode(new.encode("Heartbeat", record)).record["attempt"] == 3


def test_older_reader_rejects_newer_writer_as_unknown(v1_dir: Path, v2_dir: Path) -> None:
    old = EventCodec(load_schema_set(v1_dir))
    new = EventCodec(load_schema_set(v2_dir))
    data = new.encode("Heartbeat", {**sample_events(codec=new)["Heartbeat"], "attempt": 1})
    with pytest.raises(EventDecodeError, match="unknown_fingerprint: writer schema") as info:
        old.decode(data)
    assert info.value.reason == "unknown_fingerprint"


def test_freeze_keeps_both_versions(v2_dir: Path) -> None:
    frozen = sorted(p.name for p in (v2_dir / HISTORY_DIR).glob("Heartbeat.*.avsc"))
    versions = [int(name.split(".")[1][1:]) for name in frozen]
    assert versions == list(range(1, max(versions) + 1))  # every version, the new one too
    assert freeze(load_schema_set(v2_dir)) == []  # idempotent
