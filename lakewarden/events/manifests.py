"""The ``TaskManifest`` event: a task attempt's manifest in the event when it fits a Kafka
message, a pointer to the saved manifest otherwise.

A task attempt announces its committed manifest (``lakewarden.spark._announce``, the
``CommitClient``). The event always names the saved manifest (``manifest_path``) with its
SHA-256 and length; it also carries the manifest itself, field for field (``manifest``),
when the encoded event is at most ``MAX_EVENT_BYTES``. Past that it is a pointer, and the
job commit reads the manifest from storage as it always could.

The manifest in the event is a copy: the saved manifest stays the durable record. The
consumer rebuilds the manifest's JSON bytes from the event (``announced_manifest``), and
the job commit uses them only after showing that the saved manifest is those bytes
(``lakewarden.commit.stages.load``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from lakewarden.commit.errors import MalformedManifestError
from lakewarden.commit.manifest import (
    AnnouncedManifest,
    DirEntry,
    FileEntry,
    ManifestHeader,
    SavedManifest,
    UploadRef,
    serialize_manifest,
)
from lakewarden.events.codec import EventCodec, default_codec
from lakewarden.events.envelope import make_event

# Kafka's default largest message is about 1 MB (librdkafka's message.max.bytes 1,000,000,
# the broker's 1,048,588): 900 KiB leaves room for the record batch's own overhead.
MAX_EVENT_BYTES = 900 * 1024


def task_manifest_event(
    *,
    table_id: str,
    producer_id: str,
    table_uri: str,
    instant: str,
    job_id: str,
    task_id: str,
    attempt_id: str,
    manifest_key: str,
    file_count: int,
    total_bytes: int,
    saved: SavedManifest | None = None,
    max_bytes: int = MAX_EVENT_BYTES,
    codec: EventCodec | None = None,
) -> dict[str, Any]:
    """The ``TaskManifest`` record announcing a committed attempt: with the manifest itself
    when ``saved`` is given and the encoded event is at most ``max_bytes``, else a pointer.

    Raises: EventEncodeError (the record does not fit the schema)."""
    codec = codec or default_codec()
    record = make_event(
        "TaskManifest",
        table_id=table_id,
        producer_id=producer_id,
        codec=codec,
        job_id=job_id,
        task_id=task_id,
        task_attempt_id=attempt_id,
        instant=instant,
        manifest_path=manifest_key,
        file_count=file_count,
        total_bytes=total_bytes,
        table_uri=table_uri,
        manifest_sha256=saved.sha256 if saved is not None else "",
        manifest_size=len(saved.data) if saved is not None else -1,
        manifest=None,
    )
    if saved is None:
        return record
    inline = {**record, "manifest": manifest_body(saved)}
    if len(codec.encode("TaskManifest", inline)) > max_bytes:
        return record
    return inline


def manifest_body(saved: SavedManifest) -> dict[str, Any]:
    """The event's ``manifest`` field for ``saved`` (``TaskManifestBody``)."""
    header = saved.header
    stats = header.iostatistics
    return {
        "type": header.type,
        "version": header.version,
        "job_attempt_number": header.job_attempt_number,
        "task_attempt_dir": header.task_attempt_dir,
        "files": [_file_record(entry) for entry in saved.entries],
        "directories": [
            {"dir": d.dir, "type": d.type, "level": d.level} for d in header.directories
        ],
        "extra_data": dict(header.extra_data),
        "iostatistics": {
            "counters": dict(stats.get("counters", {})),
            "gauges": dict(stats.get("gauges", {})),
            "minimums": dict(stats.get("minimums", {})),
            "maximums": dict(stats.get("maximums", {})),
            "meanstatistics": dict(stats.get("meanstatistics", {})),
        },
    }


def _file_record(entry: FileEntry) -> dict[str, Any]:
    upload = entry.upload
    return {
        "source": entry.src,
        "destination": entry.dst,
        "size": entry.size,
        "etag": entry.etag,
        "upload": None
        if upload is None
        else {
            "bucket": upload.bucket,
            "destination_key": upload.key,
            "upload_id": upload.upload_id,
            "etags": list(upload.etags),
            "length": upload.length,
        },
    }


def announced_manifest(record: Mapping[str, Any]) -> AnnouncedManifest | None:
    """The manifest a decoded ``TaskManifest`` record carries, as the JSON bytes the task
    saved (if it is honest: the job commit checks them against storage); None for a pointer
    (the manifest was too large, or an older producer sent the event).

    Raises: MalformedManifestError (the carried manifest is not a valid manifest header)."""
    body = record.get("manifest")
    digest = record.get("manifest_sha256") or ""
    if body is None or not digest:
        return None
    attempt = str(record["task_attempt_id"])
    try:
        header = ManifestHeader(
            type=body["type"],
            version=body["version"],
            job_id=record["job_id"],
            job_attempt_number=body["job_attempt_number"],
            task_id=record["task_id"],
            task_attempt_id=attempt,
            task_attempt_dir=body["task_attempt_dir"],
            directories=tuple(
                DirEntry(dir=d["dir"], type=d["type"], level=d["level"])
                for d in body["directories"]
            ),
            extra_data=body["extra_data"],
            iostatistics=body["iostatistics"],
        )
    except ValidationError as err:
        raise MalformedManifestError(
            f"the TaskManifest event of {attempt} carries a bad manifest header: {err}",
            attempt=attempt,
            path=str(record.get("manifest_path") or ""),
        ) from err
    entries = [_file_entry(raw) for raw in body["files"]]
    key = str(record["manifest_path"])
    return AnnouncedManifest(attempt, key, serialize_manifest(header, entries), str(digest))


def _file_entry(raw: Mapping[str, Any]) -> FileEntry:
    upload = raw.get("upload")
    ref = (
        None
        if upload is None
        else UploadRef(
            upload["bucket"],
            upload["destination_key"],
            upload["upload_id"],
            upload["etags"],
            upload["length"],
        )
    )
    return FileEntry(raw["source"], raw["destination"], raw["size"], raw.get("etag"), ref)
