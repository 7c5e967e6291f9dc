"""The task attempt's side of the protocol: set up, write data files privately, commit, abort.

``TaskAttempt.create_file(dest_key)`` gives a writable binary file for a data file whose final
key is ``dest_key``:

- **rename mode** (local filesystem): a file in the attempt's working directory, named by its
  escaped destination key (``layout.attempt_file_name``; ``local_path`` gives the path, for
  pyarrow to write directly);
- **upload mode** (S3): a multipart upload to ``dest_key`` itself, in parts of
  ``options.part_size``, that is never completed here (see ``lakewarden.commit.uploads`` for
  the records that let abort find it).

Either way nothing is visible in the table until the job commit.
"""

from __future__ import annotations

import io
import os
import threading
import uuid
from typing import BinaryIO, cast

from lakewarden.commit._store import CommitStore
from lakewarden.commit.errors import PathOutsideTableError, TaskCommitError
from lakewarden.commit.layout import JobLayout, TaskAttemptId, attempt_file_name, is_reserved
from lakewarden.commit.options import CommitterOptions
from lakewarden.commit.stages import (
    StageConfig,
    StageHook,
    TaskAbortResult,
    TaskAbortStage,
    TaskCommitArgs,
    TaskCommitResult,
    TaskCommitStage,
    TaskSetupStage,
)
from lakewarden.commit.uploads import UploadRecord
from lakewarden.storage import InvalidKeyError, Storage, UploadedPart
from lakewarden.storage._keys import TEMP_PREFIX, check_key


class TaskAttempt:
    """One attempt of one task of a job; create it on the executor that runs the attempt."""

    def __init__(
        self,
        storage: Storage,
        layout: JobLayout,
        attempt_id: TaskAttemptId,
        *,
        options: CommitterOptions | None = None,
        stage_hook: StageHook | None = None,
    ) -> None:
        self.attempt_id = layout.check_attempt(attempt_id)
        self.layout = layout
        self.options = options or CommitterOptions()
        self.store = CommitStore(storage)
        self._config = StageConfig(self.store, layout, self.options, None, stage_hook)
        self._lock = threading.Lock()
        self._records: dict[str, UploadRecord] = {}
        self._destinations: set[str] = set()

    def __repr__(self) -> str:
        return f"TaskAttempt({self.attempt_id})"

    @property
    def upload_mode(self) -> bool:
        return not self.store.can_rename

    def setup(self) -> str:
        """Task setup; returns the working directory's key.

        Raises: StageFailedError (JobNotActiveError: the job is not set up or is finished)."""
        return TaskSetupStage(self._config).run(self.attempt_id)

    def local_path(self, dest_key: str) -> str:
        """Rename mode: the local path where the data file for ``dest_key`` is to be written
        (parent directories created).

        Raises: PathOutsideTableError, TaskCommitError (upload mode has no local path)."""
        self._claim(dest_key)
        if self.upload_mode:
            raise TaskCommitError(
                "this store has no local paths (upload mode). Help: use create_file().",
                job_id=self.layout.job_id,
                attempt=str(self.attempt_id),
            )
        key = self.layout.task_attempt_dir(self.attempt_id) + attempt_file_name(dest_key)
        self.store.make_dirs(key.rpartition("/")[0], staging=True)
        return self.store.path(key)

    def create_file(self, dest_key: str) -> BinaryIO:
        """A new private file for ``dest_key``; close it before committing.

        Raises: PathOutsideTableError (a key outside the table's data area or used twice)."""
        if not self.upload_mode:
            return cast(BinaryIO, _LocalFile(self.local_path(dest_key)))
        self._claim(dest_key)
        return cast(BinaryIO, _MultipartFile(self, dest_key))

    def write_file(self, dest_key: str, data: bytes) -> None:
        """Create, write and close the file for ``dest_key`` in one call."""
        with self.create_file(dest_key) as out:
            out.write(data)

    def commit(self, extra_data: dict[str, str] | None = None) -> TaskCommitResult:
        """Task commit: save this attempt's manifest.

        Raises: StageFailedError (JobNotActiveError, TaskCommitError)."""
        with self._lock:
            known = dict(self._records)
        args = TaskCommitArgs(self.attempt_id, known, dict(extra_data or {}))
        return TaskCommitStage(self._config).run(args)

    def abort(self) -> TaskAbortResult:
        """Task abort: discard this attempt's files, uploads and manifest."""
        return TaskAbortStage(self._config).run(self.attempt_id)

    def _claim(self, dest_key: str) -> None:
        try:
            check_key(dest_key)
        except InvalidKeyError as err:
            raise self._outside(dest_key, str(err)) from err
        if is_reserved(dest_key):
            raise self._outside(dest_key, "it lies in a reserved area")
        with self._lock:
            if dest_key in self._destinations:
                raise self._outside(dest_key, "this attempt already writes it")
            self._destinations.add(dest_key)

    def _outside(self, dest_key: str, why: str) -> PathOutsideTableError:
        return PathOutsideTableError(
            f"task attempt {self.attempt_id} cannot write {dest_key!r}: {why}",
            job_id=self.layout.job_id,
            attempt=str(self.attempt_id),
            path=dest_key,
        )

    def _record(self, key: str, record: UploadRecord) -> None:
        self.store.write(key, record.to_bytes())
        if record.finished:
            with self._lock:
                self._records[key] = record


class _LocalFile(io.RawIOBase):
    """A file in the attempt's working directory that gets its name only when closed.

    It is written under a hidden temporary name (``.lw-tmp-*``, which listings skip), fsynced
    and renamed to its final name by ``close()``: a file abandoned half-written (an exception,
    a crash, garbage collection) is never picked up by the task commit's scan.
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path
        self._tmp = os.path.join(os.path.dirname(path), f"{TEMP_PREFIX}{uuid.uuid4().hex}")
        try:
            self._file = open(self._tmp, "xb")  # noqa: SIM115 (closed by close())
        except BaseException:
            # Nothing was created: closed now, so that collecting this object (``__del__``)
            # has nothing to discard.
            super().close()
            raise

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._file.tell()

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        return self._file.write(data)

    def close(self) -> None:
        if self.closed:
            return
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            os.link(self._tmp, self._path)  # never replaces: a name is written once
            os.unlink(self._tmp)
        finally:
            super().close()

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            self._discard()
            return
        self.close()

    def __del__(self) -> None:
        if not self.closed:
            self._discard()

    def _discard(self) -> None:
        self._file.close()
        try:
            os.unlink(self._tmp)
        except FileNotFoundError:
            pass
        super().close()


class _MultipartFile(io.RawIOBase):
    """A write-only file whose bytes go to a multipart upload that is left pending.

    1. write the intent record (key only), then create the upload, then record its id;
    2. buffer writes and upload every full part;
    3. on close, upload the rest and record the ordered part etags and the length.
    An exception inside ``with`` aborts the upload instead.
    """

    def __init__(self, attempt: TaskAttempt, key: str) -> None:
        super().__init__()
        self._attempt, self._key = attempt, key
        self._record_key = (
            f"{attempt.layout.uploads_dir(attempt.attempt_id)}{uuid.uuid4().hex}.json"
        )
        self._part_size = attempt.options.part_size
        self._buffer = bytearray()
        self._etags: list[str] = []
        self._length = 0
        attempt._record(self._record_key, UploadRecord(key=key))  # 1.
        self._upload_id = attempt.store.create_multipart(key)
        attempt._record(self._record_key, UploadRecord(key=key, upload_id=self._upload_id))

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._length

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(data).cast("B")
        self._buffer += view
        self._length += len(view)
        while len(self._buffer) >= self._part_size:  # 2.
            self._send(bytes(self._buffer[: self._part_size]))
            del self._buffer[: self._part_size]
        return len(view)

    def _send(self, data: bytes) -> None:
        store = self._attempt.store
        part: UploadedPart = store.upload_part(
            self._key, self._upload_id, len(self._etags) + 1, data
        )
        self._etags.append(part.etag)

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self._buffer or not self._etags:  # 3. (an empty file is one empty part)
                self._send(bytes(self._buffer))
                self._buffer.clear()
            record = UploadRecord(
                key=self._key,
                upload_id=self._upload_id,
                etags=tuple(self._etags),
                length=self._length,
            )
            self._attempt._record(self._record_key, record)
        finally:
            super().close()

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            self._attempt.store.abort_multipart(self._key, self._upload_id)
            super().close()
            return
        self.close()

    def __del__(self) -> None:
        # Never finish an abandoned file: its upload stays pending and unrecorded as finished,
        # so the task commit refuses it and abort/cleanup find it.
        if not self.closed:
            super().close()
