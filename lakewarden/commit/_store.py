"""``CommitStore``: the committer's access to the table's storage.

Every store call goes through one ``MeteredStorage`` (``lakewarden.storage.metered``) that
records into the committer's ``CommitStatistics`` as ``op_<operation>`` (batched calls record
one sample per item). Faults are injected by wrapping the storage in ``FaultyStorage``
(``lakewarden.storage.faults``), never here.

Two ways to reach the data:

- **fast local path**, when the storage allows direct file access (a plain local directory,
  ``StorageCapabilities.direct_file_access``): ``lstat``, no-replace
  ``renameat2`` without per-file fsync, ``makedirs``, ``rmtree``, one fsync per destination
  directory (see ``_localfs``), and the job's staging records written without fsync
  (``write_staging``);
- **generic path** through the ``Storage`` contract otherwise (S3, and wrappers such as
  ``FaultyStorage``, whose faults and latency must apply to every call: wrappers clear
  ``direct_file_access``).

``local_root`` is set whenever the storage keeps objects as local files (``local_paths``,
wrapped or not): the validation then resolves symlinks on the real paths, which no key check
can see.
"""

from __future__ import annotations

import builtins
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TypeVar

from lakewarden.commit import _batches, _localfs
from lakewarden.commit._localfs import DESTINATION_EXISTS, RENAMED, SOURCE_MISSING
from lakewarden.commit.statistics import CommitStatistics
from lakewarden.storage import (
    AlreadyExistsError,
    NotFoundError,
    ObjectInfo,
    PendingUpload,
    Storage,
    StorageIOError,
    UploadedPart,
)
from lakewarden.storage.metered import MeteredStorage

T = TypeVar("T")

__all__ = ["DESTINATION_EXISTS", "RENAMED", "SOURCE_MISSING", "CommitStore"]


class CommitStore:
    """Metered access to the table's storage for the committer (keys relative to the table)."""

    def __init__(
        self,
        storage: Storage,
        *,
        statistics: CommitStatistics | None = None,
    ) -> None:
        self.storage = storage
        self.stats = statistics if statistics is not None else CommitStatistics()
        self.metered = MeteredStorage(storage, recorder=self.stats, prefix="op_")
        capabilities = storage.capabilities
        self.fast = capabilities.direct_file_access
        probe = storage.local_path("probe") if capabilities.local_paths else None
        self.local_root: str | None = os.path.dirname(probe) if probe is not None else None
        self._can_rename = capabilities.rename
        self.real_root = os.path.realpath(self.local_root) if self.local_root else None
        self._dirty_lock = threading.Lock()
        self._dirty_dirs: set[str] = set()

    @property
    def can_rename(self) -> bool:
        """Whether the store renames (local files) or needs multipart uploads (S3)."""
        return self._can_rename

    def path(self, key: str) -> str:
        """The local path of ``key`` (only when ``local_root`` is set)."""
        assert self.local_root is not None
        return os.path.join(self.local_root, key)

    def _call(self, op: str, call: Callable[[], T]) -> T:
        """A call made outside the ``Storage`` interface, metered as ``op``."""
        return self.metered.timed(op, call)

    # -- single calls -----------------------------------------------------------------------------

    def read(self, key: str) -> bytes:
        """Raises: NotFoundError, StorageError."""
        return self.metered.read(key)

    def read_manifest(self, key: str) -> bytes:
        """``read`` of a task manifest, metered apart (``op_read_manifest``): how many
        manifests a job commit had to read, where the others came in events.

        Raises: NotFoundError, StorageError."""
        return self._call("read_manifest", lambda: self.storage.read(key))

    def write(self, key: str, data: bytes) -> None:
        self.metered.write(key, data)

    def write_if_absent(self, key: str, data: bytes) -> None:
        """Raises: AlreadyExistsError, StorageError."""
        self.metered.write_if_absent(key, data)

    def write_staging(self, key: str, data: bytes) -> None:
        """``write_if_absent`` of a staging record of the job (``job.json``, a task manifest,
        the commit plan): on the fast local path without fsync.

        Why that is safe: a staging record is read only by this job's own commit, or by a
        resumed commit after the process that wrote it died, which the page cache survives.
        Only an operating-system crash or power loss can lose an unsynced record, and that
        also ends every writer and committer on the machine before its instant completed; the
        record's loss (or a torn record, refused by its parser) then fails a resumed commit,
        which rolls the instant back. Nothing a completed instant names is a staging record:
        the data files, the destination directories, ``_SUCCESS`` and the timeline entries
        are fsynced before ``completed`` is appended.

        Raises: AlreadyExistsError, StorageError."""
        if not self.fast:
            self.metered.write_if_absent(key, data)
            return
        path = self.path(key)

        def create() -> None:
            try:
                _localfs.create_unsynced(path, data)
            except FileExistsError as err:
                raise AlreadyExistsError(f"object {key!r} already exists", key=key) from err
            except OSError as err:
                raise StorageIOError(f"local write of {key!r} failed: {err}", key=key) from err

        self._call("write_if_absent", create)

    def list(self, prefix: str) -> builtins.list[ObjectInfo]:
        return builtins.list(self.metered.list(prefix))

    def iter_list(self, prefix: str) -> Iterator[ObjectInfo]:
        """A listing (one metered call for the whole listing)."""
        return self.metered.list(prefix)

    def size(self, key: str) -> int | None:
        """Size of the object, None when absent. Raises: NotARegularFileError (local)."""
        return self._call("stat", lambda: self.size_of(key))

    def size_of(self, key: str) -> int | None:
        """``size`` without metering (a batch meters itself)."""
        if self.fast:
            return _localfs.regular_file_size(self.path(key))
        try:
            size = self.storage.stat(key).size
        except NotFoundError:
            return None
        if self.local_root is not None:
            _localfs.regular_file_size(self.path(key))  # refuses a symlink the stat followed
        return size

    def stat_of(self, key: str) -> tuple[int, str | None] | None:
        """(size, etag) without metering (a batch meters itself); None when absent. The local
        fast path has no etags.

        Raises: NotARegularFileError (local: a symlink or directory), StorageError."""
        if self.fast:
            size = _localfs.regular_file_size(self.path(key))
            return None if size is None else (size, None)
        try:
            info = self.storage.stat(key)
        except NotFoundError:
            return None
        if self.local_root is not None:
            _localfs.regular_file_size(self.path(key))  # refuses a symlink the stat followed
        return info.size, info.etag

    def delete(self, key: str) -> None:
        self.metered.delete(key)

    def rename(self, src: str, dst: str) -> int:
        """Move one file without replacing; returns RENAMED, SOURCE_MISSING or
        DESTINATION_EXISTS."""
        return self._call("rename", lambda: self.rename_outcome(src, dst))

    def rename_outcome(self, src: str, dst: str) -> int:
        """``rename`` without metering (a batch meters itself)."""
        if not self.fast:
            try:
                self.storage.rename(src, dst)
            except NotFoundError:
                return SOURCE_MISSING
            except AlreadyExistsError:
                return DESTINATION_EXISTS
            return RENAMED
        dst_path = self.path(dst)
        try:
            _localfs.rename_noreplace(self.path(src), dst_path)
        except FileNotFoundError:
            if not os.path.isdir(os.path.dirname(dst_path)):
                os.makedirs(os.path.dirname(dst_path), exist_ok=True)
                return self.rename_outcome(src, dst)
            return SOURCE_MISSING
        except FileExistsError:
            return DESTINATION_EXISTS
        except OSError as err:
            raise StorageIOError(f"local rename of {src!r} failed: {err}", key=src) from err
        self.mark_dirty([os.path.dirname(dst_path)])
        return RENAMED

    # -- batches (one metering sample per item; ``lakewarden.commit._batches``) -------------

    def sizes(
        self, keys: Sequence[str], stop: threading.Event | None = None
    ) -> builtins.list[int | None]:
        """Sizes of ``keys`` (None when absent), stopping early when ``stop`` is set.

        Raises: NotARegularFileError (local: a symlink or directory), StorageError."""
        return _batches.sizes(self, keys, stop)

    def sizes_and_etags(
        self, keys: Sequence[str], stop: threading.Event | None = None
    ) -> builtins.list[tuple[int, str | None] | None]:
        """(size, etag) of ``keys``, None when absent (``_batches.sizes_and_etags``)."""
        return _batches.sizes_and_etags(self, keys, stop)

    def renames(
        self, pairs: Sequence[tuple[str, str]], stop: threading.Event | None = None
    ) -> builtins.list[int]:
        """Rename each ``(src, dst)``; outcomes in order, stopping early when ``stop`` is set
        or after the first outcome other than RENAMED (the caller decides about it)."""
        return _batches.renames(self, pairs, stop)

    def mark_dirty(self, paths: Iterable[str]) -> None:
        """Remember local directories the fast path changed (synced before ``_SUCCESS``)."""
        with self._dirty_lock:
            self._dirty_dirs.update(paths)

    # -- local filesystem inspection (symlink checks) ----------------------------------------

    def real_path(self, key: str) -> str:
        """``key``'s local path with every symlink resolved (local stores only)."""
        return self._call("realpath", lambda: os.path.realpath(self.path(key)))

    def symlinks(self, keys: Sequence[str]) -> builtins.list[str]:
        """Those of ``keys`` whose local path is a symlink (absent ones are not), in one
        metered batch (local stores only)."""
        start = time.perf_counter()
        found = []
        try:
            for key in keys:
                try:
                    if stat.S_ISLNK(os.lstat(self.path(key)).st_mode):
                        found.append(key)
                except FileNotFoundError:
                    continue
        finally:
            self.metered.record("lstat", time.perf_counter() - start, samples=max(len(keys), 1))
        return found

    # -- directories (local only; object stores have none) ----------------------------------

    def make_dirs(self, key: str, *, staging: bool = False) -> None:
        """Create directory ``key`` and its parents when the store has directories.
        ``staging``: a directory of the job's work area (nothing a completed instant names
        lies under it, see ``write_staging``), whose names need not survive a crash; the
        others (destination directories) are synced with their ancestors before
        ``_SUCCESS``.

        Raises: NotADirectoryError/FileExistsError (a file is in the way)."""
        if self.local_root is None:
            return
        self._call("mkdirs", lambda: _localfs.make_dirs(self.path(key)))
        if staging:
            return
        # Every ancestor may have gained an entry: all of them are synced before _SUCCESS.
        parts = key.rstrip("/").split("/")
        ancestors = {self.path("/".join(parts[:i])) for i in range(len(parts))}
        with self._dirty_lock:
            self._dirty_dirs.update(ancestors)

    def dirty_dirs(self) -> builtins.list[str]:
        """The directories the fast path changed since the last call (and forgets them)."""
        with self._dirty_lock:
            dirs, self._dirty_dirs = sorted(self._dirty_dirs), set()
        return dirs if self.fast else []

    def sync_dirs(self, dirs: Sequence[str]) -> None:
        """fsync each directory of ``dirs`` (local paths from ``dirty_dirs``)."""
        if dirs:
            self._call("fsync_dirs", lambda: _localfs.fsync_dirs(dirs))

    def child_dirs(self, prefix: str) -> builtins.list[str]:
        """Names of the directories directly under ``prefix`` (ending in '/'), sorted."""
        if self.local_root is not None:

            def names() -> builtins.list[str]:
                try:
                    with os.scandir(self.path(prefix)) as scan:
                        return sorted(e.name for e in scan if e.is_dir(follow_symlinks=False))
                except (FileNotFoundError, NotADirectoryError):
                    return []

            return self._call("list_dirs", names)
        rests = (info.key[len(prefix) :] for info in self.list(prefix))
        return sorted({rest.split("/", 1)[0] for rest in rests if "/" in rest})

    def delete_tree(self, prefix: str) -> int:
        """Delete every object under ``prefix`` (ending in '/'); returns how many (local fast
        path: -1, the directory is removed whole)."""
        if self.fast:

            def remove() -> int:
                shutil.rmtree(self.path(prefix), ignore_errors=True)
                return -1

            return self._call("delete_tree", remove)
        infos = self.list(prefix)
        for info in infos:
            self.delete(info.key)
        if self.local_root is not None:  # a wrapped local store: drop the empty directories
            self._call("delete_tree", lambda: shutil.rmtree(self.path(prefix), ignore_errors=True))
        return len(infos)

    # -- multipart uploads ------------------------------------------------------------------

    def create_multipart(self, key: str) -> str:
        return self.metered.create_multipart(key)

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> UploadedPart:
        return self.metered.upload_part(key, upload_id, number, data)

    def complete_multipart(self, key: str, upload_id: str, parts: Sequence[UploadedPart]) -> None:
        """Raises: AlreadyExistsError, NotFoundError (no such upload), StorageError."""
        self.metered.complete_multipart(key, upload_id, parts)

    def abort_multipart(self, key: str, upload_id: str) -> None:
        self.metered.abort_multipart(key, upload_id)

    def list_multipart_uploads(self, prefix: str) -> builtins.list[PendingUpload]:
        return builtins.list(self.metered.list_multipart_uploads(prefix))
