"""Load manifests: read the accepted attempts' manifests in parallel, check every entry's paths,
spill the entries, keep only what later stages need in memory."""

from __future__ import annotations

import hashlib
import re
import threading
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lakewarden.commit._spill import EntrySpill
from lakewarden.commit.errors import (
    MalformedManifestError,
    MissingManifestError,
    PathOutsideTableError,
    SourceOutsideAttemptError,
)
from lakewarden.commit.layout import RESERVED_PREFIXES, JobLayout, TaskAttemptId
from lakewarden.commit.manifest import (
    AnnouncedManifest,
    ManifestHeader,
    Row,
    UploadRef,
    parse_manifest_rows,
)
from lakewarden.commit.reports import ReportWriter
from lakewarden.commit.stages._base import Stage
from lakewarden.commit.statistics import IOStatisticsJson, empty_iostatistics
from lakewarden.commit.uploads import object_location
from lakewarden.storage import InvalidKeyError, NotFoundError, ObjectInfo
from lakewarden.storage._keys import check_key

RESERVED_NAMES = ("_temporary", ".lakewarden")
# Counters of the job's statistics (and its _SUCCESS summary): where each manifest came from.
FROM_EVENTS = "manifests_from_events"
FROM_STORAGE = "manifests_from_storage"
EVENT_MISMATCHES = "manifests_event_mismatches"
_MD5_HEX = re.compile(r"^[0-9a-f]{32}$")


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
    # The task attempt's own IOStatistics (aggregated into the job's summary).
    iostatistics: IOStatisticsJson = field(default_factory=empty_iostatistics)


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
    against the real filesystem by the validation stage):

    - the destination is a plain relative key (no absolute path, no empty, '.', '..' or
      reserved segment, no backslash or NUL), outside ``_temporary/`` and ``.lakewarden/``;
    - rename mode: the source is a plain key inside the attempt's own working directory;
    - upload mode: the upload is to exactly the destination's object in the table's bucket.

    This is the job commit's hottest loop, so a directory is checked once and remembered, and
    an entry takes the slow, precise path only when its file name looks unusual.
    """

    def __init__(self, layout: JobLayout, *, upload_mode: bool, bucket: str, prefix: str) -> None:
        self.layout = layout
        self.upload_mode = upload_mode
        self.bucket = bucket
        self.prefix = prefix
        # set.add is atomic under the GIL: the loaders share these caches without a lock.
        self._valid_dst_dirs: set[str] = set()
        self._valid_src_dirs: set[str] = set()

    def check_rows(self, rows: list[Row], attempt_dir: str, key: str) -> ManifestDigest:
        """Check every row; returns the destination hashes, directories and source directories.

        Destinations named twice, in one manifest or several, are found by the validation
        stage from the hashes.

        Raises: PathOutsideTableError, SourceOutsideAttemptError, MalformedManifestError."""
        dst_dirs, src_dirs = self._valid_dst_dirs, self._valid_src_dirs
        n = len(attempt_dir)
        hashes: list[int] = []
        dirs: set[str] = set()
        sources: set[str] = set()
        for src, dst, _, upload in rows:
            directory, _, name = dst.rpartition("/")
            # Names that might be invalid (empty, starting with '.', with a backslash or NUL,
            # non-ASCII: perhaps not UTF-8) and directories not seen yet take the precise path.
            if (
                directory not in dst_dirs
                or not name
                or name[0] == "."
                or "\\" in name
                or "\x00" in name
                or not name.isascii()
            ):
                self._check_destination(dst, key)
            hashes.append(hash(dst))
            dirs.add(directory)
            if self.upload_mode or upload is not None:
                self._check_upload(src, dst, upload, key)
                continue
            rel_dir, _, rel_name = src[n:].rpartition("/")
            if (
                rel_dir not in src_dirs
                or not src.startswith(attempt_dir)
                or not rel_name
                or rel_name[0] == "."
                or "\\" in rel_name
                or "\x00" in rel_name
                or not rel_name.isascii()
            ):
                self._check_source(src, attempt_dir, key)
            sources.add(rel_dir)
        source_dirs = {attempt_dir + d if d else attempt_dir.rstrip("/") for d in sources}
        return ManifestDigest(array("q", hashes), dirs, source_dirs)

    def _check_destination(self, dst: str, key: str) -> None:
        directory, _, name = dst.rpartition("/")
        why = _invalid_key(dst)
        if why:
            raise self._outside(dst, key, why)
        if dst.startswith(RESERVED_PREFIXES) or (not directory and name in RESERVED_NAMES):
            raise self._outside(dst, key, "lies in a reserved area (_temporary/, .lakewarden/)")
        if directory:
            self._valid_dst_dirs.add(directory)

    def _check_source(self, src: str, attempt_dir: str, key: str) -> None:
        rel = src[len(attempt_dir) :]
        if not src.startswith(attempt_dir) or _invalid_key(rel):
            raise SourceOutsideAttemptError(
                f"manifest {key} renames {src!r}, which is not inside the attempt's working "
                f"directory {attempt_dir}. Nothing was renamed.",
                job_id=self.layout.job_id,
                path=src,
            )
        directory = rel.rpartition("/")[0]
        if directory:
            self._valid_src_dirs.add(directory)

    def _check_upload(self, src: str, dst: str, upload: UploadRef | None, key: str) -> None:
        if not self.upload_mode:
            raise MalformedManifestError(
                f"manifest {key} lists a pending upload for {dst}, but this table's store "
                "renames files. Help: the task ran in upload mode against another store.",
                job_id=self.layout.job_id,
                path=dst,
            )
        if upload is None or src != dst:
            raise MalformedManifestError(
                f"manifest {key}: entry for {dst} has no pending upload, but this table's "
                "store cannot rename. Help: tasks must upload to the final key.",
                job_id=self.layout.job_id,
                path=dst,
            )
        if upload.bucket != self.bucket or upload.key != self.prefix + dst:
            raise self._outside(
                dst,
                key,
                f"has an upload to s3://{upload.bucket}/{upload.key}, not to its destination "
                f"s3://{self.bucket}/{self.prefix}{dst}",
            )

    def _outside(self, dst: str, key: str, why: str) -> PathOutsideTableError:
        return PathOutsideTableError(
            f"manifest {key}: destination {dst!r} {why}. Nothing was renamed. Help: a task "
            "attempt may only write data files inside the table.",
            job_id=self.layout.job_id,
            path=dst,
        )


@dataclass(frozen=True)
class ManifestDigest:
    """What the load stage keeps of a manifest's entries besides the spill."""

    hashes: array[int]
    directories: set[str]
    source_dirs: set[str]


def _invalid_key(path: str) -> str | None:
    """Why ``path`` is not a plain relative key (None when it is one)."""
    try:
        check_key(path)
    except InvalidKeyError as err:
        return "is not a plain relative key: " + str(err)
    return None


@dataclass(frozen=True)
class LoadArgs:
    accepted: Sequence[TaskAttemptId]
    spill: EntrySpill  # owned (and closed) by the caller, whatever happens to the stage
    # Manifests the caller already holds, by task attempt id (from TaskManifest events).
    announced: Mapping[str, AnnouncedManifest] = field(default_factory=dict)


class LoadManifestsStage(Stage[LoadArgs, LoadedManifests]):
    """Load the manifests of the accepted task attempts.

    0. when the caller holds announced manifests (``LoadArgs.announced``), list the saved
       manifests once;

    In parallel, at most ``max_loaded_manifests`` at once, for each accepted attempt:
    1. take its announced manifest if the saved one is shown to be the same bytes (listed,
       same length, the task's SHA-256, and the store's MD5 etag where it has one), else read
       ``manifests/<taskAttemptId>-manifest.json`` (absent: the attempt never committed);
    2. parse it and check that it names this job, job attempt, task and task attempt;
    3. check every entry's paths (``EntryRules``);
    4. spill its entries in chunks, keep its checksum, totals, directories, destination hashes
       and IOStatistics; with ``diagnostics_manifest_directory``, copy its bytes there.

    Raises: MissingManifestError, MalformedManifestError, PathOutsideTableError,
    SourceOutsideAttemptError.
    """

    name = "job_stage_load_manifests"

    def _execute(self, args: LoadArgs) -> LoadedManifests:
        upload_mode = not self.store.can_rename
        bucket, prefix = object_location(self.store.storage)
        rules = EntryRules(self.layout, upload_mode=upload_mode, bucket=bucket, prefix=prefix)
        spill = args.spill
        options = self.config.options
        self._reports = ReportWriter(
            self.store.storage, None, options.diagnostics_manifest_directory, self.store.stats
        )
        digests: array[int] = array("q")
        directories: set[str] = set()
        lock = threading.Lock()
        held = args.announced
        saved = self._saved() if any(str(a) in held for a in args.accepted) else {}  # 0.

        def load(attempt: TaskAttemptId, stop: threading.Event) -> LoadedManifest | None:
            if stop.is_set():
                return None
            announced = held.get(str(attempt))
            loaded, hashes, dirs = self._load_one(attempt, rules, spill, announced, saved)
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

    def _saved(self) -> dict[str, ObjectInfo]:
        """The saved manifests of this job attempt (one listing: one call per 1,000 on S3)."""
        return {info.key: info for info in self.store.list(self.layout.manifests_dir)}

    def _load_one(
        self,
        attempt: TaskAttemptId,
        rules: EntryRules,
        spill: EntrySpill,
        announced: AnnouncedManifest | None,
        saved: Mapping[str, ObjectInfo],
    ) -> tuple[LoadedManifest, array[int], set[str]]:
        key = self.layout.manifest_key(attempt)
        data = self._announced_bytes(announced, saved.get(key))  # 1.
        if data is None:
            data = self._read(attempt, key)
        sha256 = hashlib.sha256(data).hexdigest()
        self._reports.manifest(self.layout.job_id, key, data)
        header, rows = parse_manifest_rows(data, key=key)  # 2.
        del data
        self._check_header(header, attempt, key)
        digest = rules.check_rows(rows, self.layout.task_attempt_dir(attempt), key)  # 3.
        batch = self.config.batch  # 4.
        chunks = tuple(spill.add(rows[i : i + batch]) for i in range(0, len(rows), batch))
        total = sum(row[2] for row in rows)
        loaded = LoadedManifest(
            attempt,
            key,
            sha256,
            len(rows),
            total,
            chunks,
            frozenset(digest.source_dirs),
            header.iostatistics,
        )
        return loaded, digest.hashes, digest.directories

    def _announced_bytes(
        self, announced: AnnouncedManifest | None, info: ObjectInfo | None
    ) -> bytes | None:
        """The announced manifest's bytes when the saved manifest is shown to be the same
        bytes; None when storage must be read (nothing announced, nothing saved, or any
        difference: the saved manifest is the durable record and wins)."""
        if announced is None:
            return None
        data = announced.data
        etag = (info.etag or "").strip('"').lower() if info is not None else ""
        same = (
            info is not None
            and announced.key == info.key
            and len(data) == info.size
            and hashlib.sha256(data).hexdigest() == announced.sha256
        )
        if same and _MD5_HEX.match(etag):  # a single PUT's etag is its content's MD5
            same = hashlib.md5(data, usedforsecurity=False).hexdigest() == etag
        if not same:
            self.store.stats.increment(EVENT_MISMATCHES)
            return None
        self.store.stats.increment(FROM_EVENTS)
        return data

    def _read(self, attempt: TaskAttemptId, key: str) -> bytes:
        try:
            data = self.store.read_manifest(key)
        except NotFoundError as err:
            raise MissingManifestError(
                f"accepted task attempt {attempt} has no manifest {key}. Help: only attempts "
                "whose task commit succeeded can be accepted.",
                job_id=self.layout.job_id,
                attempt=str(attempt),
                path=key,
            ) from err
        self.store.stats.increment(FROM_STORAGE)
        return data

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
