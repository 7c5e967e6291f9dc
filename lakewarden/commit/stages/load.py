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
from lakewarden.commit.layout import RESERVED_PREFIXES, JobLayout, TaskAttemptId
from lakewarden.commit.manifest import FileEntry, ManifestHeader, parse_manifest
from lakewarden.commit.stages._base import Stage
from lakewarden.commit.uploads import object_location
from lakewarden.storage import InvalidKeyError, NotFoundError
from lakewarden.storage._keys import TEMP_PREFIX, check_key

RESERVED_NAMES = ("_temporary", ".lakewarden")


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
    against the real filesystem by the validation stage).

    Per entry this runs on the hot path, so a key is checked as "valid directory, checked once
    and cached" + "valid last segment" rather than segment by segment every time.
    """

    def __init__(self, layout: JobLayout, *, upload_mode: bool, bucket: str, prefix: str) -> None:
        self.layout = layout
        self.upload_mode = upload_mode
        self.bucket = bucket
        self.prefix = prefix
        self._valid_dirs: set[str] = set()
        self._lock = threading.Lock()

    def check(self, entry: FileEntry, attempt_dir: str, key: str) -> None:
        """Raises: PathOutsideTableError, SourceOutsideAttemptError, MalformedManifestError."""
        dst = entry.dst
        why = self._invalid(dst)
        if why:
            raise self._outside(dst, key, why)
        if dst.startswith(RESERVED_PREFIXES) or dst in RESERVED_NAMES:
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
            src = entry.src
            if not src.startswith(attempt_dir) or self._invalid(src[len(attempt_dir) :]):
                raise SourceOutsideAttemptError(
                    f"manifest {key} renames {src!r}, which is not inside the attempt's "
                    f"working directory {attempt_dir}. Nothing was renamed.",
                    job_id=self.layout.job_id,
                    path=src,
                )

    def _invalid(self, path: str) -> str | None:
        """Why ``path`` is not a plain relative key (None when it is one)."""
        directory, _, name = path.rpartition("/")
        if (
            not name
            or name in (".", "..")
            or name.startswith(TEMP_PREFIX)
            or "\\" in name
            or "\x00" in name
            or path.startswith("/")
        ):
            return "is not a plain relative key (absolute, empty, '.', '..' or reserved name)"
        if directory and directory not in self._valid_dirs:
            try:
                check_key(directory)
            except InvalidKeyError as err:
                return "is not a plain relative key: " + str(err)
            with self._lock:
                self._valid_dirs.add(directory)
        return None

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
