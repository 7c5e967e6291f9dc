"""Validation before any rename, and the optional validation of the output after it."""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field

from lakewarden.commit._localfs import NotARegularFileError
from lakewarden.commit.errors import (
    ConflictingCommitRequestError,
    DestinationExistsError,
    DuplicateDestinationError,
    EtagMismatchError,
    ManifestChangedError,
    MissingFileError,
    PathOutsideTableError,
    SizeMismatchError,
    SourceOutsideAttemptError,
)
from lakewarden.commit.layout import METADATA_DIR, TEMPORARY_DIR
from lakewarden.commit.manifest import FileEntry
from lakewarden.commit.stages._base import Stage
from lakewarden.commit.stages.load import LoadedManifest, LoadedManifests
from lakewarden.commit.uploads import comparable_etag, multipart_etag
from lakewarden.storage import AlreadyExistsError, NotFoundError


class CommitPlan(BaseModel):
    """``commit-plan.json``: what the first validated run of a job commit checked.

    Its existence means: every accepted manifest was validated, and (with
    ``check_destinations``) no destination existed. A resumed run may therefore take
    "source gone, destination present with the right size" as a rename it already did."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    job_id: str = Field(alias="jobId")
    job_attempt_number: int = Field(alias="jobAttemptNumber")
    manifests: dict[str, str] = Field(description="accepted task attempt id -> manifest sha256")
    files: int
    bytes: int
    destinations_checked: bool = Field(alias="destinationsChecked")


@dataclass(frozen=True)
class ValidatedPlan:
    loaded: LoadedManifests
    done: dict[int, bytearray]  # chunk -> per entry 1 when already at its destination
    resumed: bool
    plan: CommitPlan

    @property
    def already_done(self) -> int:
        return sum(sum(flags) for flags in self.done.values())


class ValidateManifestsStage(Stage[LoadedManifests, ValidatedPlan]):
    """Check everything a rename could get wrong, before the first rename.

    1. no destination named twice, in one manifest or across manifests (a 64-bit hash per
       destination, counted by pyarrow; a hash collision is told apart from a duplicate by
       the names themselves);
    2. a plan recorded by an interrupted run must name the same attempts and manifests;
    3. on a filesystem, no symlink leads a source out of its attempt directory or a
       destination out of the table (or into ``_temporary/`` or ``.lakewarden/``);
    4. per entry, in parallel: the source is a regular file of the recorded size, and the
       destination is free; on a resumed run, a missing source whose destination has the
       recorded size is a rename already done;
    5. record the plan (first run).

    Raises: DuplicateDestinationError, ConflictingCommitRequestError, ManifestChangedError,
    PathOutsideTableError, SourceOutsideAttemptError, SizeMismatchError,
    DestinationExistsError, MissingFileError.
    """

    name = "job_stage_validate_manifests"

    def _execute(self, args: LoadedManifests) -> ValidatedPlan:
        _check_duplicates(args, self.layout.job_id)  # 1.
        plan = self._plan(args)
        recorded = self._recorded_plan()
        resumed = recorded is not None
        if recorded is not None and recorded.manifests != plan.manifests:  # 2.
            raise self._plan_mismatch(recorded, plan)
        if self.store.real_root is not None and not args.upload_mode:
            self._check_symlinks(args)  # 3.
        owners = args.chunk_owner()
        check_dst = self.config.options.checks_destinations(upload_mode=args.upload_mode)

        def check(chunk: int, stop: threading.Event) -> tuple[int, bytearray]:
            if args.upload_mode:
                entries = args.spill.read(chunk)
                return chunk, self._check_uploads(entries, resumed, check_dst, stop)
            rows = args.spill.pairs(chunk)
            return chunk, self._check_files(rows, owners[chunk], resumed, check_dst, stop)

        done = dict(self.parallel(range(args.spill.chunks), check))  # 4.
        if not resumed:  # 5.
            self._record(plan)
        return ValidatedPlan(args, done, resumed, recorded or plan)

    def _plan(self, loaded: LoadedManifests) -> CommitPlan:
        return CommitPlan(
            job_id=self.layout.job_id,
            job_attempt_number=self.layout.job_attempt,
            manifests={str(m.attempt): m.sha256 for m in loaded.manifests},
            files=loaded.files,
            bytes=loaded.bytes,
            destinations_checked=self.config.options.checks_destinations(
                upload_mode=loaded.upload_mode
            ),
        )

    def _recorded_plan(self) -> CommitPlan | None:
        try:
            return CommitPlan.model_validate_json(self.store.read(self.layout.plan_key))
        except NotFoundError:
            return None

    def _record(self, plan: CommitPlan) -> None:
        try:
            self.store.write_staging(self.layout.plan_key, plan.model_dump_json().encode())
        except AlreadyExistsError:
            recorded = self._recorded_plan()
            if recorded is None or recorded.manifests != plan.manifests:
                raise self._plan_mismatch(recorded, plan) from None

    def _plan_mismatch(self, recorded: CommitPlan | None, plan: CommitPlan) -> Exception:
        old = set(recorded.manifests) if recorded else set()
        if old != set(plan.manifests):
            return ConflictingCommitRequestError(
                f"job {self.layout.job_id} was being committed with attempts {sorted(old)}; "
                f"this request accepts {sorted(plan.manifests)}. Help: resume with the same "
                "accepted attempts, or abort the job.",
                job_id=self.layout.job_id,
            )
        changed = sorted(a for a in old if recorded and recorded.manifests[a] != plan.manifests[a])
        return ManifestChangedError(
            f"the manifests of {changed} changed since job {self.layout.job_id} validated "
            "them. Help: manifests are immutable once saved; abort the job.",
            job_id=self.layout.job_id,
            path=changed[0] if changed else None,
        )

    def _check_symlinks(self, loaded: LoadedManifests) -> None:
        """Step 3. Destination directories (a few partitions) are resolved whole; sources are
        checked cheaply: the tasks directory must resolve to itself, and no directory between
        it and a source may be a symlink (one cached ``lstat`` per directory; the files
        themselves are ``lstat``-ed by step 4)."""
        store, job = self.store, self.layout.job_id
        root = store.real_root
        assert root is not None
        reserved = [os.path.join(root, p.rstrip("/")) for p in (TEMPORARY_DIR, METADATA_DIR)]
        for directory in sorted(loaded.directories):
            real = store.real_path(directory)
            if not _inside(real, root) or any(_inside(real, r) for r in reserved):
                raise PathOutsideTableError(
                    f"destination directory {directory!r} resolves (through a symbolic link) "
                    f"to {real}, outside the table's data area. Nothing was renamed.",
                    job_id=job,
                    path=directory,
                )
        tasks = self.layout.tasks_dir.rstrip("/")
        if store.real_path(tasks) != os.path.join(root, tasks):
            raise SourceOutsideAttemptError(
                f"the job's tasks directory {tasks} resolves through a symbolic link. Nothing "
                "was renamed.",
                job_id=job,
                path=tasks,
            )
        between: set[str] = set()  # every directory between the tasks dir and a source
        for manifest in loaded.manifests:
            for directory in manifest.source_dirs:
                key = directory
                while len(key) > len(tasks) and key not in between:
                    between.add(key)
                    key = key.rpartition("/")[0]
        links = store.symlinks(sorted(between))  # a missing one is reported by step 4
        if links:
            raise SourceOutsideAttemptError(
                f"source directory {links[0]!r} is a symbolic link (it could lead outside the "
                "attempt's working directory). Nothing was renamed.",
                job_id=job,
                path=links[0],
            )

    def _check_files(
        self,
        rows: list[tuple[str, str, int]],
        manifest: LoadedManifest,
        resumed: bool,
        check_dst: bool,
        stop: threading.Event,
    ) -> bytearray:
        job = self.layout.job_id
        try:
            sources = self.store.sizes([src for src, _, _ in rows], stop)
        except NotARegularFileError as err:
            raise SourceOutsideAttemptError(
                f"source {err.path} of {manifest.attempt} is not a regular file (a symbolic "
                "link?). Nothing was renamed.",
                job_id=job,
                path=err.path,
            ) from err
        # A resumed run does not re-check free destinations: a crash inside a link + unlink
        # rename can leave both names on one inode, which the rename stage then completes.
        check_dst = check_dst and not resumed
        flags = bytearray(len(rows))
        if not check_dst and sources == [size for _, _, size in rows]:
            return flags  # the common case, compared in one C-level pass
        probe = [i for i, size in enumerate(sources) if size is None or check_dst]
        targets = self._sizes([rows[i][1] for i in probe], stop)
        destination = dict(zip(probe, targets, strict=True))
        for i, ((src, dst, expected), size) in enumerate(zip(rows, sources, strict=False)):
            found = destination.get(i)
            if size is None:
                if resumed and found == expected:
                    flags[i] = 1
                    continue
                raise MissingFileError(
                    f"source {src} of {manifest.attempt} is missing"
                    + (" and its destination is not in place" if resumed else "")
                    + ". Help: the attempt's files were removed; abort the job.",
                    job_id=job,
                    path=src,
                )
            if size != expected:
                raise SizeMismatchError(
                    f"source {src} has {size} bytes, its manifest says {expected}. Nothing was "
                    "renamed.",
                    job_id=job,
                    path=src,
                )
            if check_dst and found is not None:
                raise self._occupied(dst)
        return flags

    def _check_uploads(
        self, entries: list[FileEntry], resumed: bool, check_dst: bool, stop: threading.Event
    ) -> bytearray:
        flags = bytearray(len(entries))
        if not (resumed or check_dst):
            return flags
        for i, (entry, found) in enumerate(
            zip(entries, self._sizes([e.dst for e in entries], stop), strict=False)
        ):
            if found is None:
                continue
            if resumed and found == entry.size:
                flags[i] = 1  # completed by the interrupted run (keys are unique per attempt)
                continue
            raise self._occupied(entry.dst)
        return flags

    def _sizes(self, keys: list[str], stop: threading.Event) -> list[int | None]:
        try:
            return self.store.sizes(keys, stop)
        except NotARegularFileError as err:
            raise self._occupied(err.path) from err

    def _occupied(self, dst: str) -> DestinationExistsError:
        return DestinationExistsError(
            f"destination {dst} already exists and this job did not put it there. Nothing "
            "was renamed. Help: data file names must be unique (they carry a write token).",
            job_id=self.layout.job_id,
            path=dst,
        )


def _inside(real: str, root: str) -> bool:
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _check_duplicates(loaded: LoadedManifests, job_id: str) -> None:
    """Raises DuplicateDestinationError naming the destination and the attempts."""
    n = len(loaded.digests)
    if n < 2:
        return
    hashes = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(loaded.digests)])
    if len(pc.unique(hashes)) == n:
        return
    counts = pc.value_counts(hashes)
    repeated = set(counts.field("values").filter(pc.greater(counts.field("counts"), 1)).to_pylist())
    owners: dict[str, list[str]] = defaultdict(list)
    for manifest in loaded.manifests:
        for chunk in manifest.chunks:
            for entry in loaded.spill.read(chunk):
                if hash(entry.dst) in repeated:
                    owners[entry.dst].append(str(manifest.attempt))
    for dst, attempts in sorted(owners.items()):
        if len(attempts) > 1:
            raise DuplicateDestinationError(
                f"destination {dst!r} is named {len(attempts)} times, by {attempts}. Nothing "
                "was renamed. Help: two entries must never name the same file.",
                job_id=job_id,
                path=dst,
            )


@dataclass(frozen=True)
class OutputReport:
    checked: int
    etags_checked: int = 0


class ValidateOutputStage(Stage[ValidatedPlan, OutputReport]):
    """Optional: after the files are placed, every destination exists with its recorded
    size, and, where the store tags objects (S3) and the entry is a completed upload, with
    the etag its recorded parts make (``multipart_etag``). A store whose etags have another
    form (SSE-KMS) is checked by size alone.

    Raises: MissingFileError, SizeMismatchError, EtagMismatchError.
    """

    name = "job_stage_optional_validate_output"

    def _execute(self, args: ValidatedPlan) -> OutputReport:
        spill = args.loaded.spill

        def check(chunk: int, stop: threading.Event) -> tuple[int, int]:
            entries = spill.read(chunk)
            etags = 0
            for entry, found in zip(
                entries, self.store.sizes_and_etags([e.dst for e in entries], stop), strict=False
            ):
                etags += self._check(entry, found)
            return len(entries), etags

        done = self.parallel(range(spill.chunks), check)
        return OutputReport(sum(n for n, _ in done), sum(e for _, e in done))

    def _check(self, entry: FileEntry, found: tuple[int, str | None] | None) -> int:
        """1 when the etag was compared too. Raises: MissingFileError, SizeMismatchError,
        EtagMismatchError."""
        job_id = self.layout.job_id
        if found is None:
            raise MissingFileError(
                f"committed file {entry.dst} is missing", job_id=job_id, path=entry.dst
            )
        size, stored = found
        if size != entry.size:
            raise SizeMismatchError(
                f"committed file {entry.dst} has {size} bytes, expected {entry.size}",
                job_id=job_id,
                path=entry.dst,
            )
        actual = comparable_etag(stored)
        expected = multipart_etag(entry.upload.etags) if entry.upload is not None else None
        if actual is None or expected is None:
            return 0
        if actual != expected:
            raise EtagMismatchError(
                f"committed object {entry.dst} has etag {actual}, but the parts its task "
                f"attempt uploaded make {expected}. Help: another writer replaced the object "
                "after the commit placed it; the job's manifests are kept under _temporary "
                "when cleanup is off.",
                job_id=job_id,
                path=entry.dst,
            )
        return 1
