"""The task manifest: Hadoop's ``TaskManifest`` JSON, field for field.

::

    {"type": "org.apache.hadoop.mapreduce.lib.output.committer.manifest.files.TaskManifest/1",
     "version": 1, "jobId": ..., "jobAttemptNumber": 0, "taskID": ..., "taskAttemptID": ...,
     "taskAttemptDir": ...,
     "files": [{"s": source, "d": destination, "z": size, "e": etag or null}, ...],
     "directories": [{"d": directory, "t": status, "l": level}, ...],
     "extraData": {...}, "iostatistics": {...}}

Differences from Hadoop, all additive: paths are keys relative to the table root (Hadoop
writes absolute URIs; relative keys make "inside the table" a property of the text and keep
manifests valid when a table is moved); in upload mode (S3) a file entry also has ``"u"``, the
pending multipart upload in the field names of S3A's ``SinglePendingCommit`` (``bucket``,
``destinationKey``, ``uploadId``, ``etags`` in part order, ``length``), with ``s == d``
because the data is already uploaded to its destination key.

The header is frozen pydantic. File entries are the hot path (tens of thousands per manifest):
``FileEntry`` is a ``__slots__`` class and ``parse_manifest`` checks the raw dicts by hand.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lakewarden.commit.errors import MalformedManifestError
from lakewarden.commit.statistics import empty_iostatistics

MANIFEST_TYPE = "org.apache.hadoop.mapreduce.lib.output.committer.manifest.files.TaskManifest/1"
MANIFEST_VERSION = 1
# Hadoop's EntryStatus ordinals for directory entries.
DIR_UNKNOWN, DIR_NOT_FOUND, DIR_FILE, DIR_EXISTS, DIR_CREATED = range(5)


class UploadRef:
    """A pending multipart upload holding a file's data at its destination key."""

    __slots__ = ("bucket", "etags", "key", "length", "upload_id")

    def __init__(
        self, bucket: str, key: str, upload_id: str, etags: Sequence[str], length: int
    ) -> None:
        self.bucket = bucket
        self.key = key  # the full object key in the bucket (table prefix included)
        self.upload_id = upload_id
        self.etags = tuple(etags)
        self.length = length

    def to_json(self) -> dict[str, Any]:
        return {
            "bucket": self.bucket,
            "destinationKey": self.key,
            "uploadId": self.upload_id,
            "etags": list(self.etags),
            "length": self.length,
        }

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UploadRef) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash((self.key, self.upload_id))

    def __repr__(self) -> str:
        return f"UploadRef({self.key!r}, {self.upload_id!r}, parts={len(self.etags)})"


class FileEntry:
    """One file to commit: source key, destination key, size, optional etag and upload."""

    __slots__ = ("dst", "etag", "size", "src", "upload")

    def __init__(
        self,
        src: str,
        dst: str,
        size: int,
        etag: str | None = None,
        upload: UploadRef | None = None,
    ) -> None:
        self.src = src
        self.dst = dst
        self.size = size
        self.etag = etag
        self.upload = upload

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"s": self.src, "d": self.dst, "z": self.size, "e": self.etag}
        if self.upload is not None:
            out["u"] = self.upload.to_json()
        return out

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FileEntry) and self.to_json() == other.to_json()

    def __hash__(self) -> int:
        return hash((self.src, self.dst))

    def __repr__(self) -> str:
        return f"FileEntry({self.src!r} -> {self.dst!r}, {self.size})"


class DirEntry(BaseModel):
    """A destination directory the files of the manifest need (informational: the job
    commit derives directories from the validated file entries)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    dir: str = Field(alias="d")
    type: int = Field(default=DIR_UNKNOWN, alias="t", ge=0)
    level: int = Field(default=0, alias="l", ge=0)


class ManifestHeader(BaseModel):
    """Everything of a manifest but its file entries."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    type: str = MANIFEST_TYPE
    version: int = MANIFEST_VERSION
    job_id: str = Field(alias="jobId")
    job_attempt_number: int = Field(alias="jobAttemptNumber", ge=0)
    task_id: str = Field(alias="taskID")
    task_attempt_id: str = Field(alias="taskAttemptID")
    task_attempt_dir: str = Field(alias="taskAttemptDir")
    directories: tuple[DirEntry, ...] = ()
    extra_data: dict[str, str] = Field(default_factory=dict, alias="extraData")
    iostatistics: dict[str, dict[str, Any]] = Field(default_factory=empty_iostatistics)


def directories_of(entries: Iterable[FileEntry]) -> tuple[DirEntry, ...]:
    """The destination directories of ``entries`` (sorted), as Hadoop's DirEntry list."""
    dirs = {entry.dst.rpartition("/")[0] for entry in entries}
    dirs.discard("")
    return tuple(DirEntry(dir=d, type=DIR_UNKNOWN, level=d.count("/") + 1) for d in sorted(dirs))


def serialize_manifest(header: ManifestHeader, files: Sequence[FileEntry]) -> bytes:
    """The manifest's JSON bytes (Hadoop field order: header, files, directories, extras)."""
    head = header.model_dump(by_alias=True, mode="json")
    doc = {key: head[key] for key in _HEAD_ORDER}
    doc["files"] = [entry.to_json() for entry in files]
    doc["directories"] = head["directories"]
    doc["extraData"] = head["extraData"]
    doc["iostatistics"] = head["iostatistics"]
    return json.dumps(doc, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class SavedManifest:
    """A manifest as a task commit saved it: header, entries and the exact bytes stored (what
    the task attempt announces in its ``TaskManifest`` event)."""

    header: ManifestHeader
    entries: tuple[FileEntry, ...]
    data: bytes

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass(frozen=True, slots=True)
class AnnouncedManifest:
    """A task attempt's manifest as its ``TaskManifest`` event carried it: the manifest's JSON
    bytes rebuilt from the event, and the task's SHA-256 of the bytes it saved. A job commit
    loads it instead of reading storage once the saved manifest is shown to be these bytes
    (``LoadManifestsStage``)."""

    attempt: str
    key: str  # where the task saved it (the event's manifest_path)
    data: bytes
    sha256: str


_HEAD_ORDER = (
    "type",
    "version",
    "jobId",
    "jobAttemptNumber",
    "taskID",
    "taskAttemptID",
    "taskAttemptDir",
)


Row = tuple[str, str, int, UploadRef | None]  # (source, destination, size, upload)


def parse_manifest(data: bytes, *, key: str) -> tuple[ManifestHeader, list[FileEntry]]:
    """Header and entries of manifest ``data`` (read from ``key``, named in errors).

    Raises: MalformedManifestError (not JSON, wrong type/version, bad fields or entries)."""
    header, raw_files = _parse_document(data, key)
    return header, [_entry(raw, key, i) for i, raw in enumerate(raw_files)]


def parse_manifest_rows(data: bytes, *, key: str) -> tuple[ManifestHeader, list[Row]]:
    """``parse_manifest`` for the job commit's hot path: entries as plain tuples, checked with
    as few operations as possible (an irregular entry takes the slow path for its error).

    Raises: MalformedManifestError."""
    header, raw_files = _parse_document(data, key)
    rows: list[Row] = []
    append = rows.append
    for index, raw in enumerate(raw_files):
        try:
            src, dst, size = raw["s"], raw["d"], raw["z"]
            etag, upload = raw.get("e"), raw.get("u")
        except (KeyError, TypeError, AttributeError):
            src = dst = size = etag = upload = None
        if (
            type(src) is not str
            or type(dst) is not str
            or type(size) is not int
            or size < 0
            or not src
            or not dst
            or (etag is not None and type(etag) is not str)
        ):
            entry = _entry(raw, key, index)  # raises the precise error
            src, dst, size, upload = entry.src, entry.dst, entry.size, entry.upload
        append((src, dst, size, None if upload is None else _upload(upload, key, index)))
    return header, rows


# A manifest lists one task attempt's files (~200 bytes each): 256 MiB is over a million
# files, far past any real task. Past it, parsing would take ~10x its size in memory.
MAX_MANIFEST_BYTES = 256 * 1024 * 1024


def _parse_document(data: bytes, key: str) -> tuple[ManifestHeader, list[Any]]:
    if len(data) > MAX_MANIFEST_BYTES:
        raise MalformedManifestError(
            f"manifest {key} is {len(data)} bytes; the limit is {MAX_MANIFEST_BYTES} "
            "(MAX_MANIFEST_BYTES). Help: a task attempt this large should be split into more "
            "tasks (repartition); the job commit stops here and nothing is committed.",
            path=key,
        )
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise MalformedManifestError(f"manifest {key} is not JSON: {err}", path=key) from err
    if not isinstance(doc, dict):
        raise MalformedManifestError(f"manifest {key} is not a JSON object", path=key)
    raw_files = doc.pop("files", None)
    if not isinstance(raw_files, list):
        raise MalformedManifestError(f"manifest {key} has no 'files' list", path=key)
    try:
        header = ManifestHeader.model_validate(doc)
    except ValidationError as err:
        raise MalformedManifestError(f"manifest {key} has a bad header: {err}", path=key) from err
    if header.type != MANIFEST_TYPE or header.version != MANIFEST_VERSION:
        raise MalformedManifestError(
            f"manifest {key} has type {header.type!r} version {header.version}; expected "
            f"{MANIFEST_TYPE!r} version {MANIFEST_VERSION}",
            path=key,
        )
    return header, raw_files


def _entry(raw: Any, key: str, index: int) -> FileEntry:
    if not isinstance(raw, dict):
        raise _bad_entry(key, index, "is not an object")
    src, dst, size, etag = raw.get("s"), raw.get("d"), raw.get("z"), raw.get("e")
    if not isinstance(src, str) or not isinstance(dst, str) or not src or not dst:
        raise _bad_entry(key, index, "needs non-empty string 's' and 'd'")
    if type(size) is not int or size < 0:
        raise _bad_entry(key, index, f"has size {size!r}; expected an integer >= 0")
    if etag is not None and not isinstance(etag, str):
        raise _bad_entry(key, index, "has a non-string etag")
    upload = raw.get("u")
    return FileEntry(src, dst, size, etag, None if upload is None else _upload(upload, key, index))


def _upload(raw: Any, key: str, index: int) -> UploadRef:
    if not isinstance(raw, dict):
        raise _bad_entry(key, index, "has an upload 'u' that is not an object")
    bucket, object_key = raw.get("bucket"), raw.get("destinationKey")
    upload_id, etags, length = raw.get("uploadId"), raw.get("etags"), raw.get("length")
    strings = (bucket, object_key, upload_id)
    if not all(isinstance(value, str) and value for value in strings):
        raise _bad_entry(key, index, "upload needs bucket, destinationKey and uploadId")
    if not isinstance(etags, list) or not etags or not all(isinstance(e, str) for e in etags):
        raise _bad_entry(key, index, "upload needs a non-empty list of part etags")
    if type(length) is not int or length < 0:
        raise _bad_entry(key, index, f"upload has length {length!r}")
    return UploadRef(str(bucket), str(object_key), str(upload_id), etags, length)


def _bad_entry(key: str, index: int, what: str) -> MalformedManifestError:
    return MalformedManifestError(f"manifest {key}: file entry {index} {what}", path=key)
