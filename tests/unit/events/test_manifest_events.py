"""The TaskManifest event carries the manifest when the encoded event fits a Kafka message
(``MAX_EVENT_BYTES``), a pointer otherwise; old pointer-only events still decode."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_writer

from lakewarden.commit import FileEntry, ManifestCommitter, SavedManifest, new_job_id
from lakewarden.commit.manifest import serialize_manifest
from lakewarden.events import decode, default_codec, encode
from lakewarden.events.manifests import (
    MAX_EVENT_BYTES,
    announced_manifest,
    task_manifest_event,
)
from lakewarden.storage.local import LocalStorage

SCHEMAS = Path(__file__).resolve().parents[3] / "schemas" / "history"


def _saved(tmp_path: Path, files: int) -> tuple[str, str, SavedManifest]:
    committer = ManifestCommitter(LocalStorage(tmp_path / "t"), new_job_id())
    committer.setup_job()
    attempt = committer.task_attempt(0)
    attempt.setup()
    for i in range(files):
        attempt.write_file(f"region=eu/part-{i:06d}-{'x' * 60}.parquet", b"data")
    result = attempt.commit(extra_data={"instant": "20260101000000000"})
    assert result.saved is not None
    return committer.job_id, str(result.attempt), result.saved


def _event(job_id: str, attempt: str, saved: SavedManifest, **kwargs: Any) -> dict[str, Any]:
    return task_manifest_event(
        table_id="orders",
        producer_id="test",
        table_uri="/tables/orders",
        instant="20260101000000000",
        job_id=job_id,
        task_id=attempt.replace("attempt_", "task_").rsplit("_", 1)[0],
        attempt_id=attempt,
        manifest_key=f"_temporary/manifest_{job_id}/00/manifests/{attempt}-manifest.json",
        file_count=len(saved.entries),
        total_bytes=sum(e.size for e in saved.entries),
        saved=saved,
        **kwargs,
    )


def test_a_small_manifest_travels_in_the_event_byte_for_byte(tmp_path: Path) -> None:
    job_id, attempt, saved = _saved(tmp_path, 3)
    message = encode("TaskManifest", _event(job_id, attempt, saved))
    record = decode(message).record
    assert len(message) <= MAX_EVENT_BYTES
    assert record["manifest"] is not None and len(record["manifest"]["files"]) == 3
    assert record["manifest_sha256"] == saved.sha256
    assert record["manifest_size"] == len(saved.data)
    announced = announced_manifest(record)
    assert announced is not None and announced.data == saved.data  # the saved bytes, rebuilt
    assert json.loads(announced.data)["extraData"] == {"instant": "20260101000000000"}


def test_past_the_threshold_the_event_is_a_pointer(tmp_path: Path) -> None:
    job_id, attempt, saved = _saved(tmp_path, 3)
    inline = encode("TaskManifest", _event(job_id, attempt, saved))
    at_limit = _event(job_id, attempt, saved, max_bytes=len(inline))
    assert at_limit["manifest"] is not None  # exactly at the limit still fits
    over = _event(job_id, attempt, saved, max_bytes=len(inline) - 1)
    assert over["manifest"] is None
    assert over["manifest_sha256"] == saved.sha256  # a pointer still names what was saved
    assert announced_manifest(decode(encode("TaskManifest", over)).record) is None


def test_a_manifest_too_large_for_a_kafka_message_is_a_pointer(tmp_path: Path) -> None:
    job_id, attempt, small = _saved(tmp_path, 1)
    [entry] = small.entries
    # ~500 bytes of Avro per entry (long names): 2,000 entries are past 900 KiB.
    entries = tuple(
        FileEntry(f"{entry.src}{i:06d}{'x' * 200}", f"{entry.dst}{i:06d}{'x' * 200}", 4)
        for i in range(2000)
    )
    saved = SavedManifest(small.header, entries, serialize_manifest(small.header, entries))
    record = _event(job_id, attempt, saved)
    assert record["manifest"] is None
    assert len(encode("TaskManifest", record)) < 2_000


def test_an_old_pointer_only_event_decodes_with_the_current_schema() -> None:
    [path] = SCHEMAS.glob("TaskManifest.v2.*.avsc")
    writer = json.loads(path.read_text())
    old = {
        "envelope": {
            "event_id": "e",
            "event_time": 0,
            "table_id": "orders",
            "producer_id": "old",
            "schema_version": 2,
        },
        "job_id": "j",
        "task_id": "task_j_000000",
        "task_attempt_id": "attempt_j_000000_0",
        "instant": "20260101000000000",
        "manifest_path": "_temporary/manifest_j/00/manifests/attempt_j_000000_0-manifest.json",
        "file_count": 1,
        "total_bytes": 4,
        "table_uri": "",
    }
    body = io.BytesIO()
    schemaless_writer(body, parse_schema(writer), old)
    fingerprint = bytes.fromhex(path.name.split(".")[2])
    record = default_codec().decode(b"\xc3\x01" + fingerprint + body.getvalue()).record
    assert record["manifest"] is None and record["manifest_sha256"] == ""
    assert record["manifest_size"] == -1
    assert announced_manifest(record) is None
