"""Load manifests: read the accepted attempts' manifests in parallel, check every entry's paths,
spill the entries, keep only what later stages need in memory."""

from __future__ import annotations

import hashlib
import threading
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from lakewarden.commit._spill import EntrySpill
from lakewarden.commit.errors import (
    DuplicateDestinationError,
    MalformedManifestError,
    MissingManifestError,
    PathOutsideTableError,
    SourceOutsideAttemptError,
)
from lakewarden.commit.layout import JobLayout, TaskAttemptId, is_reserved
from lakewarden.commit.manifest import FileEntry, ManifestHeader, parse_manifest
from lakewarden.commit.stages._base import Stage
from lakewarden.commit.uploads import object_location
from lakewarden.storage import InvalidKeyError, NotFoundError
from lakewarden.storage._keys import check_key


@dataclass(frozen=True)
class LoadedManifest:
    """What is kept of one manifest: identity, checksum, totals and its spilled chunks."""

    attempt: TaskAttemptId
    key: str
    sha256: str
    files: int
    bytes: int
    chunks: tuple[int, ...]
    source_dirs: frozenset[str]


@dataclass(frozen=True)
class LoadedManifests:
    manifests: tuple[LoadedManifest, ...]
    directories: frozenset[str]  # destination directories (keys), '' excluded
    digests: array[int]  # a 64-bit hash of every destination, for the duplicate check
    spill: EntrySpill
    upload_mode: bool

    @property
    def files(self) -> int:
        return sum(m.files for m in self.manifests)

    @property
    def bytes(self) -> int:
        return sum(m.bytes for m in self.manifests)

    def chunk_owner(self) -> dict[int, LoadedManifest]:
        return {chunk: m for m in self.manifests for chunk in m.chunks}


class EntryRules:
    """The path rules every file entry must pass (pure string checks; symlinks are checked
    against the real filesystem by the validation stage)."""

    def __init__(self, layout: JobLayout, *, upload_mode: bool, bucket: str, prefix: str) -> None:
        self.layout = layout
        self.upload_mode = upload_mode
        self.bucket = bucket
        self.prefix = prefix

    def check(self, entry: FileEntry, attempt_dir: str, key: str) -> None:
        """Raises: PathOutsideTableError, SourceOutsideAttemptError, MalformedManifestError."""
        dst = entry.dst
        try:
            check_key(dst)
        except InvalidKeyError as err:
            raise self._outside(dst, key, "is not a plain relative key: " + str(err)) from err
        if is_reserved(dst):
            raise self._outside(dst, key, "lies in a reserved area (_temporary/, .lakewarden/)")
        if self.upload_mode:
            self._check_upload(entry, key)
        elif entry.upload is not None:
            raise MalformedManifestError(
                f"manifest {key} lists a pending upload for {dst}, but this table's store "
                "renames files. Help: the task ran in upload mode against another store.",
                job_id=self.layout.job_id,
                path=dst,
            )
        else:
            self._check_source(entry.src, attempt_dir, key)

    def _check_source(self, src: str, attempt_dir: str, key: str) -> None:
        valid = src.startswith(attempt_dir) and len(src) > len(attempt_dir)
        if valid:
            try:
                check_key(src)
            except InvalidKeyError:
                valid = False
        if not valid:
            raise SourceOutsideAttemptError(
                f"manifest {key} renames {src!r}, which is not inside the attempt's working "
                f"directory {attempt_dir}. Nothing was renamed.",
                job_id=self.layout.job_id,
                path=src,
            )

    def _check_upload(self, entry: FileEntry, key: str) -> None:
        upload = entry.upload
        if upload is None or entry.src != entry.dst:
            raise MalformedManifestError(
                f"manifest {key}: entry for {entry.dst} has no pending upload, but this "
                "table's store cannot rename. Help: tasks must upload to the final key.",
                job_id=self.layout.job_id,
                path=entry.dst,
            )
        if upload.bucket != self.bucket or upload.key != self.prefix + entry.dst:
            raise self._outside(
                entry.dst,
                key,
                f"has an upload to s3://{upload.bucket}/{upload.key}, not to its destination "
                f"s3://{self.bucket}/{self.prefix}{entry.dst}",
            )

    def _outside(self, dst: str, key: str, why: str) -> PathOutsideTableError:
        return PathOutsideTableError(
            f"manifest {key}: destination {dst!r} {why}. Nothing was renamed. Help: a task "
            "attempt may only write data files inside the table.",
            job_id=self.layout.job_id,
            path=dst,
        )


@dataclass(frozen=True)
class LoadArgs:
    accepted: Sequence[TaskAttemptId]
    spill: EntrySpill  # owned (and closed) by the caller, whatever happens to the stage


class LoadManifestsStage(Stage[LoadArgs, LoadedManifests]):
    """Load the manifests of the accepted task attempts.

    In parallel, at most ``max_loaded_manifests`` at once, for each accepted attempt:
    1. read ``manifests/<taskAttemptId>-manifest.json`` (absent: the attempt never committed);
    2. parse it and check that it names this job, job attempt, task and task attempt;
    3. check every entry's paths (``EntryRules``) and that no destination repeats in it;
    4. spill its entries in chunks, keep its checksum, totals, directories, destination hashes.

    Raises: MissingManifestError, MalformedManifestError, PathOutsideTableError,
    SourceOutsideAttemptError, DuplicateDestinationError.
    """

    name = "job_stage_load_manifests"

    def _execute(self, args: LoadArgs) -> LoadedManifests:
        upload_mode = not self.store.can_rename
        bucket, prefix = object_location(self.store.storage)
        rules = EntryRules(self.layout, upload_mode=upload_mode, bucket=bucket, prefix=prefix)
        spill = args.spill
        digests: array[int] = array("q")
        directories: set[str] = set()
        lock = threading.Lock()

        def load(attempt: TaskAttemptId, stop: threading.Event) -> LoadedManifest | None:
            if stop.is_set():
                return None
            loaded, hashes, dirs = self._load_one(attempt, rules, spill)
            with lock:
                digests.extend(hashes)
                directories.update(dirs)
            return loaded

        results = self.parallel(
            args.accepted, load, max_in_flight=self.config.options.max_loaded_manifests
        )
        directories.discard("")
        manifests = tuple(m for m in results if m is not None)
        return LoadedManifests(manifests, frozenset(directories), digests, spill, upload_mode)

    def _load_one(
        self, attempt: TaskAttemptId, rules: EntryRules, spill: EntrySpill
    ) -> tuple[LoadedManifest, array[int], set[str]]:
        key = self.layout.manifest_key(attempt)
        try:  # 1.
            data = self.store.read(key)
        except NotFoundError as err:
            raise MissingManifestError(
                f"accepted task attempt {attempt} has no manifest {key}. Help: only attempts "
                "whose task commit succeeded can be accepted.",
                job_id=self.layout.job_id,
                attempt=str(attempt),
                path=key,
            ) from err
        sha256 = hashlib.sha256(data).hexdigest()
        header, entries = parse_manifest(data, key=key)  # 2.
        del data
        self._check_header(header, attempt, key)
        attempt_dir = self.layout.task_attempt_dir(attempt)
        hashes: array[int] = array("q")
        dirs: set[str] = set()
        sources: set[str] = set()
        seen: set[str] = set()
        for entry in entries:  # 3.
            rules.check(entry, attempt_dir, key)
            dst = entry.dst
            if dst in seen:
                raise DuplicateDestinationError(
                    f"manifest {key} names destination {dst!r} twice. Nothing was renamed.",
                    job_id=self.layout.job_id,
                    path=dst,
                )
            seen.add(dst)
            hashes.append(hash(dst))
            dirs.add(dst.rpartition("/")[0])
            sources.add(entry.src.rpartition("/")[0])
        batch = self.config.batch  # 4.
        chunks = tuple(spill.add(entries[i : i + batch]) for i in range(0, len(entries), batch))
        total = sum(entry.size for entry in entries)
        loaded = LoadedManifest(
            attempt, key, sha256, len(entries), total, chunks, frozenset(sources)
        )
        return loaded, hashes, dirs

    def _check_header(self, header: ManifestHeader, attempt: TaskAttemptId, key: str) -> None:
        expected = (self.layout.job_id, self.layout.job_attempt, str(attempt.task_id), str(attempt))
        found = (
            header.job_id,
            header.job_attempt_number,
            header.task_id,
            header.task_attempt_id,
        )
        if found != expected:
            raise MalformedManifestError(
                f"manifest {key} is for (job, job attempt, task, task attempt) {found}, "
                f"expected {expected}",
                job_id=self.layout.job_id,
                attempt=str(attempt),
                path=key,
            )
