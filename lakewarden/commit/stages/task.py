"""Task commit and task abort."""

from __future__ import annotations

from dataclasses import dataclass, field

from lakewarden.commit.errors import TaskCommitError
from lakewarden.commit.layout import TaskAttemptId, destination_of, is_reserved
from lakewarden.commit.manifest import (
    FileEntry,
    ManifestHeader,
    SavedManifest,
    UploadRef,
    directories_of,
    parse_manifest,
    serialize_manifest,
)
from lakewarden.commit.stages._base import Stage
from lakewarden.commit.stages.setup import require_active_job
from lakewarden.commit.uploads import (
    UploadRecord,
    abort_recorded,
    multipart_etag,
    object_location,
    read_records,
)
from lakewarden.storage import AlreadyExistsError, InvalidKeyError, NotFoundError
from lakewarden.storage._keys import check_key


@dataclass(frozen=True)
class TaskCommitArgs:
    attempt: TaskAttemptId
    # Upload records the attempt's writer already holds (record key -> finished record): the
    # scan then reads only records it does not know.
    known_records: dict[str, UploadRecord] = field(default_factory=dict)
    extra_data: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskCommitResult:
    attempt: TaskAttemptId
    manifest_key: str
    files: int
    bytes: int
    repeated: bool  # the same manifest was already saved (a retried commit whose reply was lost)
    # What is saved under ``manifest_key`` (on a repeated commit, the first commit's bytes):
    # what the attempt announces in its TaskManifest event.
    saved: SavedManifest | None = None


class TaskCommitStage(Stage[TaskCommitArgs, TaskCommitResult]):
    """Save the manifest of a task attempt's files.

    1. check that the job is active (a zombie of a finished job cannot commit);
    2. scan the attempt's working directory: its data files (rename mode), or its upload
       records, each of which must be finished (upload mode);
    3. build the manifest (Hadoop's TaskManifest);
    4. save it as ``manifests/<taskAttemptId>-manifest.json`` with put-if-absent. Hadoop's
       "save to ``<taskAttemptId>-manifest.json.tmp``, rename to ``<taskId>-manifest.json``"
       is how it gets an atomic, exclusive create; ``write_if_absent`` is that primitive (on a
       filesystem it is literally a temporary file linked into place) and also exists on S3,
       which cannot rename. Per-attempt names let the job commit pick the accepted attempt.
       If the manifest exists already, the same content means a repeated commit (success);
       other content is refused.

    Raises: JobNotActiveError, TaskCommitError.
    """

    name = "task_stage_commit"

    def _execute(self, args: TaskCommitArgs) -> TaskCommitResult:
        attempt = args.attempt
        require_active_job(self.store, self.layout, f"commit task attempt {attempt}")  # 1.
        if self.store.can_rename:  # 2.
            entries = self._scan_files(attempt)
        else:
            entries = self._scan_uploads(attempt, args.known_records)
        header = ManifestHeader(  # 3.
            job_id=self.layout.job_id,
            job_attempt_number=self.layout.job_attempt,
            task_id=str(attempt.task_id),
            task_attempt_id=str(attempt),
            task_attempt_dir=self.layout.task_attempt_dir(attempt),
            directories=directories_of(entries),
            extra_data=args.extra_data,
            iostatistics=self.store.stats.snapshot(),
        )
        key = self.layout.manifest_key(attempt)
        data = serialize_manifest(header, entries)
        repeated = False
        saved = SavedManifest(header, tuple(entries), data)
        try:  # 4.
            self.store.write_staging(key, data)
        except AlreadyExistsError:
            stored = self.store.read(key)
            first, saved_entries = parse_manifest(stored, key=key)
            if [e.to_json() for e in saved_entries] != [e.to_json() for e in entries]:
                raise TaskCommitError(
                    f"task attempt {attempt} already committed a different manifest ({key}). "
                    "Help: a task attempt commits once; retry the task as a new attempt.",
                    job_id=self.layout.job_id,
                    attempt=str(attempt),
                    path=key,
                ) from None
            repeated = True
            saved = SavedManifest(first, tuple(saved_entries), stored)
        total = sum(entry.size for entry in entries)
        return TaskCommitResult(attempt, key, len(entries), total, repeated, saved)

    def _scan_files(self, attempt: TaskAttemptId) -> list[FileEntry]:
        prefix = self.layout.task_attempt_dir(attempt)
        entries = []
        for info in self.store.list(prefix):
            dst = destination_of(info.key[len(prefix) :])
            _check_destination(dst, attempt, self.layout.job_id)
            entries.append(FileEntry(info.key, dst, info.size))
        return entries

    def _scan_uploads(
        self, attempt: TaskAttemptId, known: dict[str, UploadRecord]
    ) -> list[FileEntry]:
        bucket, prefix = object_location(self.store.storage)
        entries = []
        for info in self.store.list(self.layout.uploads_dir(attempt)):
            record = known.get(info.key)
            if record is None:
                record = UploadRecord.model_validate_json(self.store.read(info.key))
            if not record.finished or record.upload_id is None or record.length is None:
                raise TaskCommitError(
                    f"task attempt {attempt} has an unfinished upload to {record.key} "
                    f"({info.key}). Help: close every file before committing the task.",
                    job_id=self.layout.job_id,
                    attempt=str(attempt),
                    path=record.key,
                )
            _check_destination(record.key, attempt, self.layout.job_id)
            ref = UploadRef(
                bucket, prefix + record.key, record.upload_id, record.etags, record.length
            )
            # The object's etag once completed, as the store will give it (Hadoop records each
            # file's etag in the manifest); None when the parts' etags are not MD5s.
            etag = multipart_etag(record.etags)
            entries.append(FileEntry(record.key, record.key, record.length, etag, ref))
        return entries


def _check_destination(dst: str, attempt: TaskAttemptId, job_id: str) -> None:
    try:
        check_key(dst)
    except InvalidKeyError as err:
        raise TaskCommitError(
            f"task attempt {attempt} wrote an invalid destination {dst!r}: {err}",
            job_id=job_id,
            attempt=str(attempt),
            path=dst,
        ) from err
    if is_reserved(dst):
        raise TaskCommitError(
            f"task attempt {attempt} wrote {dst!r} into a reserved area of the table",
            job_id=job_id,
            attempt=str(attempt),
            path=dst,
        )


@dataclass(frozen=True)
class TaskAbortResult:
    attempt: TaskAttemptId
    aborted_uploads: int
    unresolved_uploads: int


class TaskAbortStage(Stage[TaskAttemptId, TaskAbortResult]):
    """Throw away a task attempt's work (only for an attempt the driver did not accept).

    1. upload mode: abort the attempt's pending uploads (its records, see ``uploads``);
    2. delete its manifest, if it committed one;
    3. delete its working directory.
    """

    name = "task_stage_abort_task"

    def _execute(self, args: TaskAttemptId) -> TaskAbortResult:
        aborted = unresolved = 0
        if not self.store.can_rename:  # 1.
            records = read_records(self.store, self.layout.uploads_dir(args))
            aborted, unresolved = abort_recorded(self.store, records)
        try:
            self.store.delete(self.layout.manifest_key(args))  # 2.
        except NotFoundError:
            pass
        self.store.delete_tree(self.layout.task_attempt_dir(args))  # 3.
        return TaskAbortResult(args, aborted, unresolved)
