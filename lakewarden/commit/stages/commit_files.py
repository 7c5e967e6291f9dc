"""Putting files in place: create directories, rename files (filesystems), complete uploads (S3)."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from lakewarden.commit._store import DESTINATION_EXISTS, RENAMED, SOURCE_MISSING
from lakewarden.commit.errors import (
    DestinationExistsError,
    DirectoryConflictError,
    MissingFileError,
)
from lakewarden.commit.manifest import DIR_CREATED, DIR_EXISTS, DIR_UNKNOWN, FileEntry
from lakewarden.commit.stages._base import Stage
from lakewarden.commit.stages.validate import ValidatedPlan
from lakewarden.storage import AlreadyExistsError, NotFoundError, UploadedPart


def leaf_directories(directories: frozenset[str]) -> list[str]:
    """The directories that are no other one's ancestor (creating them creates the rest)."""
    ordered = sorted(directories)
    return [
        d
        for i, d in enumerate(ordered)
        if i + 1 == len(ordered) or not ordered[i + 1].startswith(d + "/")
    ]


@dataclass(frozen=True)
class CreatedDirectories:
    """The leaf directories the job commit needed, each with its status (Hadoop's
    ``EntryStatus``: ``DIR_EXISTS`` when it was there already, ``DIR_CREATED`` when this run
    made it)."""

    status: dict[str, int]

    def count(self, status: int) -> int:
        return sum(1 for s in self.status.values() if s == status)


class CreateDirectoriesStage(Stage[ValidatedPlan, CreatedDirectories]):
    """Create the destination directories (filesystems only; object stores have none).

    1. merge the directories of all manifests and keep the leaves;
    2. create them in parallel (``mkdir -p``), noting which existed already; returns each
       leaf with its status.

    Hadoop deletes a file found where a directory must go; we refuse instead, since that file
    may be another commit's data.

    Raises: DirectoryConflictError.
    """

    name = "job_stage_create_target_dirs"

    def _execute(self, args: ValidatedPlan) -> CreatedDirectories:
        if args.loaded.upload_mode or self.store.local_root is None:
            return CreatedDirectories({})
        leaves = leaf_directories(args.loaded.directories)  # 1.

        def create(directory: str, stop: threading.Event) -> tuple[str, int]:
            if stop.is_set():
                return directory, DIR_UNKNOWN
            existed = os.path.isdir(self.store.path(directory))
            try:
                self.store.make_dirs(directory)
            except (FileExistsError, NotADirectoryError) as err:
                raise DirectoryConflictError(
                    f"cannot create directory {directory}: a file is in the way ({err}). "
                    "Nothing was renamed.",
                    job_id=self.layout.job_id,
                    path=directory,
                ) from err
            return directory, DIR_EXISTS if existed else DIR_CREATED

        return CreatedDirectories(dict(self.parallel(leaves, create)))  # 2.


@dataclass(frozen=True)
class PlacedFiles:
    placed: int  # renamed or completed by this run
    already_done: int  # found in place (an interrupted run did them)


class RenameFilesStage(Stage[ValidatedPlan, PlacedFiles]):
    """Rename every pending file to its destination (filesystems).

    1. per chunk of entries, in parallel: rename each pending entry, never replacing;
    2. a missing source whose destination has the recorded size was renamed before (by an
       interrupted run): counted as done; anything else stops every worker at once;
    3. fsync the touched directories once (the fast path renames without per-file sync).

    Raises: MissingFileError, DestinationExistsError.
    """

    name = "job_stage_rename_files"

    def _execute(self, args: ValidatedPlan) -> PlacedFiles:
        spill = args.loaded.spill

        def rename(chunk: int, stop: threading.Event) -> tuple[int, int]:
            rows, flags = spill.pairs(chunk), args.done[chunk]
            pending = [row for row, flag in zip(rows, flags, strict=True) if not flag]
            return self._rename_all(pending, stop)

        counts = self.parallel(range(spill.chunks), rename)  # 1.
        dirs = self.store.dirty_dirs()  # 3. (concurrent fsyncs share journal commits)
        groups = [group for group in (dirs[i::4] for i in range(4)) if group]
        self.parallel(groups, lambda d, _: self.store.sync_dirs(d))
        renamed = sum(c[0] for c in counts)
        return PlacedFiles(renamed, args.already_done + sum(c[1] for c in counts))

    def _rename_all(
        self, pending: list[tuple[str, str, int]], stop: threading.Event
    ) -> tuple[int, int]:
        renamed = recognised = 0
        start = 0
        while start < len(pending) and not stop.is_set():
            outcomes = self.store.renames([(src, dst) for src, dst, _ in pending[start:]], stop)
            start += len(outcomes)
            if outcomes and outcomes[-1] != RENAMED:  # 2.
                self._reconcile(pending[start - 1], outcomes[-1])
                recognised += 1
                renamed += len(outcomes) - 1
            else:
                renamed += len(outcomes)
        return renamed, recognised

    def _reconcile(self, row: tuple[str, str, int], outcome: int) -> None:
        src, dst, size = row
        if outcome == SOURCE_MISSING:
            if self.store.size(dst) == size:
                return
            raise MissingFileError(
                f"source {src} vanished and {dst} is not in place",
                job_id=self.layout.job_id,
                path=src,
            )
        assert outcome == DESTINATION_EXISTS
        raise DestinationExistsError(
            f"cannot rename {src}: destination {dst} already exists (this job did not put it "
            "there). Help: data file names must be unique; abort the job (it rolls back only "
            "the files it renamed).",
            job_id=self.layout.job_id,
            path=dst,
        )


class CompleteUploadsStage(Stage[ValidatedPlan, PlacedFiles]):
    """Complete every pending multipart upload (S3: the job commit's "rename").

    1. per chunk of entries, in parallel: ``complete_multipart`` with ``If-None-Match: *``;
    2. "already exists" or "no such upload" followed by an object of the recorded size at the
       destination is an upload completed before (keys are unique per attempt): done. The
       upload is then aborted in case it is still pending (a no-op otherwise).

    Raises: DestinationExistsError, MissingFileError.
    """

    name = "job_stage_complete_uploads"

    def _execute(self, args: ValidatedPlan) -> PlacedFiles:
        spill = args.loaded.spill

        def complete(chunk: int, stop: threading.Event) -> tuple[int, int]:
            placed = recognised = 0
            for entry, flag in zip(spill.read(chunk), args.done[chunk], strict=True):
                if stop.is_set():
                    break
                if flag:
                    continue
                if self._complete(entry):
                    placed += 1
                else:
                    recognised += 1
            return placed, recognised

        counts = self.parallel(range(spill.chunks), complete)  # 1.
        return PlacedFiles(sum(c[0] for c in counts), args.already_done + sum(c[1] for c in counts))

    def _complete(self, entry: FileEntry) -> bool:
        """True when this call completed it, False when it was complete already."""
        upload = entry.upload
        assert upload is not None
        parts = [UploadedPart(i + 1, etag) for i, etag in enumerate(upload.etags)]
        try:
            self.store.complete_multipart(entry.dst, upload.upload_id, parts)
            return True
        except (AlreadyExistsError, NotFoundError) as err:  # 2.
            if self.store.size(entry.dst) == entry.size:
                self.store.abort_multipart(entry.dst, upload.upload_id)
                return False
            if isinstance(err, AlreadyExistsError):
                raise DestinationExistsError(
                    f"cannot complete the upload of {entry.dst}: another object is there",
                    job_id=self.layout.job_id,
                    path=entry.dst,
                ) from err
            raise MissingFileError(
                f"the upload {upload.upload_id} of {entry.dst} is gone (aborted?) and the "
                "file is not in place. Help: the job's data is lost; abort the job.",
                job_id=self.layout.job_id,
                path=entry.dst,
            ) from err
