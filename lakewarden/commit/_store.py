"""``CommitStore``: the one metered wrapper every store call of the committer goes through.

Each call is counted and timed in ``CommitStatistics`` as ``op_<operation>`` (batched calls
record one sample per item). A ``fault_hook(operation, key)`` runs before every call's effect,
including every item of a batch: tests raise from it to inject a failure or a crash at exactly
the n-th rename, say.

Two ways to reach the data:

- **fast local path**, when the storage allows direct file access (a plain local directory,
  ``StorageCapabilities.direct_file_access``): ``lstat``, no-replace
  ``renameat2`` without per-file fsync, ``makedirs``, ``rmtree`` and one fsync per touched
  directory (see ``_localfs``);
- **generic path** through the ``Storage`` contract otherwise (S3, and wrappers such as
  ``FaultyStorage``, whose faults and latency must apply to every call).

``local_root`` is set whenever the storage keeps objects as local files (``local_paths``,
wrapped or not): the validation then resolves symlinks on the real paths, which no key check
can see.
"""

from __future__ import annotations

import builtins
import errno
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from lakewarden.commit import _localfs
from lakewarden.commit.statistics import CommitStatistics
from lakewarden.storage import (
    NotFoundError,
    ObjectInfo,
    PendingUpload,
    Storage,
    StorageIOError,
    UploadedPart,
)

T = TypeVar("T")
FaultHook = Callable[[str, str], None]

# Outcomes of one rename in a batch.
RENAMED = 0
SOURCE_MISSING = 1
DESTINATION_EXISTS = 2


class CommitStore:
    """Metered access to the table's storage for the committer (keys relative to the table)."""

    def __init__(
        self,
        storage: Storage,
        *,
        statistics: CommitStatistics | None = None,
        fault_hook: FaultHook | None = None,
    ) -> None:
        self.storage = storage
        self.stats = statistics if statistics is not None else CommitStatistics()
        self.fault_hook = fault_hook
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

    # -- metering ---------------------------------------------------------------------------------

    def _call(self, op: str, key: str, call: Callable[[], T]) -> T:
        start = time.perf_counter()
        failed = True
        try:
            if self.fault_hook is not None:
                self.fault_hook(op, key)
            result = call()
            failed = False
            return result
        except NotFoundError:
            failed = False  # an answer ("absent"), not a failure of the store
            raise
        finally:
            self.stats.record("op_" + op, time.perf_counter() - start, failed=failed)

    def _hook(self, op: str, key: str) -> None:
        if self.fault_hook is not None:
            self.fault_hook(op, key)

    # -- single calls -----------------------------------------------------------------------------

    def read(self, key: str) -> bytes:
        """Raises: NotFoundError, StorageError."""
        return self._call("read", key, lambda: self.storage.read(key))

    def write(self, key: str, data: bytes) -> None:
        self._call("write", key, lambda: self.storage.write(key, data))

    def write_if_absent(self, key: str, data: bytes) -> None:
        """Raises: AlreadyExistsError, StorageError."""
        self._call("write_if_absent", key, lambda: self.storage.write_if_absent(key, data))

    def list(self, prefix: str) -> builtins.list[ObjectInfo]:
        return self._call("list", prefix, lambda: builtins.list(self.storage.list(prefix)))

    def iter_list(self, prefix: str) -> Iterator[ObjectInfo]:
        """A lazy listing (one metered call for the whole iteration's start)."""
        return self._call("list", prefix, lambda: self.storage.list(prefix))

    def size(self, key: str) -> int | None:
        """Size of the object, None when absent. Raises: NotARegularFileError (local)."""
        return self._call("stat", key, lambda: self._size(key))

    def _size(self, key: str) -> int | None:
        if self.fast:
            return _localfs.regular_file_size(self.path(key))
        try:
            size = self.storage.stat(key).size
        except NotFoundError:
            return None
        if self.local_root is not None:
            _localfs.regular_file_size(self.path(key))  # refuses a symlink the stat followed
        return size

    def delete(self, key: str) -> None:
        self._call("delete", key, lambda: self.storage.delete(key))

    def rename(self, src: str, dst: str) -> int:
        """Move one file without replacing; returns RENAMED, SOURCE_MISSING or
        DESTINATION_EXISTS."""
        return self._call("rename", src, lambda: self._rename(src, dst))

    def _rename(self, src: str, dst: str) -> int:
        from lakewarden.storage import AlreadyExistsError

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
                return self._rename(src, dst)
            return SOURCE_MISSING
        except FileExistsError:
            return DESTINATION_EXISTS
        except OSError as err:
            raise StorageIOError(f"local rename of {src!r} failed: {err}", key=src) from err
        with self._dirty_lock:
            self._dirty_dirs.add(os.path.dirname(dst_path))
        return RENAMED

    # -- batches (one hook call per item, one metering sample per item) ---------------------

    def sizes(
        self, keys: Sequence[str], stop: threading.Event | None = None
    ) -> builtins.list[int | None]:
        """Sizes of ``keys`` (None when absent), stopping early when ``stop`` is set.

        Raises: NotARegularFileError (local: a symlink or directory), StorageError."""
        start = time.perf_counter()
        out: builtins.list[int | None] = []
        try:
            if self.fast and self.fault_hook is None:
                self._sizes_fast(keys, stop, out)
            else:
                for key in keys:
                    if stop is not None and stop.is_set():
                        break
                    self._hook("stat", key)
                    out.append(self._size(key))
        finally:
            self.stats.record("op_stat", time.perf_counter() - start, samples=max(len(out), 1))
        return out

    def _sizes_fast(
        self, keys: Sequence[str], stop: threading.Event | None, out: builtins.list[int | None]
    ) -> None:
        """The hot loop of validation on a local filesystem: one ``lstat`` per key, all in one
        C-level ``map`` while every file exists (the common case), per key otherwise."""
        if stop is not None and stop.is_set():
            return
        base = self.path("")
        paths = [base + key for key in keys]
        try:
            stats = builtins.list(map(os.lstat, paths))
        except (FileNotFoundError, NotADirectoryError):
            self._sizes_one_by_one(keys, paths, stop, out)
            return
        if not all(map(stat.S_ISREG, [st.st_mode for st in stats])):
            for key, st in zip(keys, stats, strict=True):
                if not stat.S_ISREG(st.st_mode):
                    raise _localfs.NotARegularFileError(key, st.st_mode)
        out.extend([st.st_size for st in stats])

    def _sizes_one_by_one(
        self,
        keys: Sequence[str],
        paths: builtins.list[str],
        stop: threading.Event | None,
        out: builtins.list[int | None],
    ) -> None:
        for key, path in zip(keys, paths, strict=True):
            if stop is not None and stop.is_set():
                return
            try:
                st = os.lstat(path)
            except (FileNotFoundError, NotADirectoryError):
                out.append(None)
                continue
            if not stat.S_ISREG(st.st_mode):
                raise _localfs.NotARegularFileError(key, st.st_mode)
            out.append(st.st_size)

    def renames(
        self, pairs: Sequence[tuple[str, str]], stop: threading.Event | None = None
    ) -> builtins.list[int]:
        """Rename each ``(src, dst)``; outcomes in order, stopping early when ``stop`` is set
        or after the first outcome other than RENAMED (the caller decides about it)."""
        start = time.perf_counter()
        out: builtins.list[int] = []
        try:
            if self.fast and self.fault_hook is None:
                self._renames_fast(pairs, stop, out)
            else:
                for src, dst in pairs:
                    if stop is not None and stop.is_set():
                        break
                    self._hook("rename", src)
                    out.append(self._rename(src, dst))
                    if out[-1] != RENAMED:
                        break
        finally:
            self.stats.record("op_rename", time.perf_counter() - start, samples=max(len(out), 1))
        return out

    def _renames_fast(
        self,
        pairs: Sequence[tuple[str, str]],
        stop: threading.Event | None,
        out: builtins.list[int],
    ) -> None:
        """The hot loop of the job commit on a local filesystem: one ``renameat2`` per file,
        no exception on the success path, the touched directories collected per batch."""
        base = os.fsencode(self.path(""))
        rename = _localfs.rename_noreplace_errno
        dirs: set[str] = set()
        try:
            for src, dst in pairs:
                if stop is not None and stop.is_set():
                    return
                code = rename(base + src.encode(), base + dst.encode())
                if code == 0:
                    out.append(RENAMED)
                    dirs.add(dst.rpartition("/")[0])
                    continue
                out.append(self._rename_failed(code, src, dst))
                if out[-1] != RENAMED:
                    return
                dirs.add(dst.rpartition("/")[0])
        finally:
            with self._dirty_lock:
                self._dirty_dirs.update(self.path(d) for d in dirs)

    def _rename_failed(self, code: int, src: str, dst: str) -> int:
        if code == errno.EEXIST:
            return DESTINATION_EXISTS
        if code in (errno.ENOENT, errno.ENOTDIR):
            return self._rename(src, dst)  # tells a missing source from a missing directory
        raise StorageIOError(
            f"local rename of {src!r} to {dst!r} failed: {os.strerror(code)}", key=src
        )

    # -- local filesystem inspection (symlink checks) ----------------------------------------

    def real_path(self, key: str) -> str:
        """``key``'s local path with every symlink resolved (local stores only)."""
        return self._call("realpath", key, lambda: os.path.realpath(self.path(key)))

    def symlinks(self, keys: Sequence[str]) -> builtins.list[str]:
        """Those of ``keys`` whose local path is a symlink (absent ones are not), in one
        metered batch (local stores only)."""
        start = time.perf_counter()
        found = []
        try:
            for key in keys:
                self._hook("lstat", key)
                try:
                    if stat.S_ISLNK(os.lstat(self.path(key)).st_mode):
                        found.append(key)
                except FileNotFoundError:
                    continue
        finally:
            self.stats.record("op_lstat", time.perf_counter() - start, samples=max(len(keys), 1))
        return found

    # -- directories (local only; object stores have none) ----------------------------------

    def make_dirs(self, key: str) -> None:
        """Create directory ``key`` and its parents when the store has directories.

        Raises: NotADirectoryError/FileExistsError (a file is in the way)."""
        if self.local_root is None:
            return
        self._call("mkdirs", key, lambda: _localfs.make_dirs(self.path(key)))
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
            self._call("fsync_dirs", dirs[0], lambda: _localfs.fsync_dirs(dirs))

    def child_dirs(self, prefix: str) -> builtins.list[str]:
        """Names of the directories directly under ``prefix`` (ending in '/'), sorted."""
        if self.local_root is not None:

            def names() -> builtins.list[str]:
                try:
                    with os.scandir(self.path(prefix)) as scan:
                        return sorted(e.name for e in scan if e.is_dir(follow_symlinks=False))
                except (FileNotFoundError, NotADirectoryError):
                    return []

            return self._call("list_dirs", prefix, names)
        rests = (info.key[len(prefix) :] for info in self.list(prefix))
        return sorted({rest.split("/", 1)[0] for rest in rests if "/" in rest})

    def delete_tree(self, prefix: str) -> int:
        """Delete every object under ``prefix`` (ending in '/'); returns how many (local fast
        path: -1, the directory is removed whole)."""
        if self.fast:

            def remove() -> int:
                shutil.rmtree(self.path(prefix), ignore_errors=True)
                return -1

            return self._call("delete_tree", prefix, remove)
        infos = self.list(prefix)
        for info in infos:
            self.delete(info.key)
        if self.local_root is not None:  # a wrapped local store: drop the empty directories
            self._call(
                "delete_tree",
                prefix,
                lambda: shutil.rmtree(self.path(prefix), ignore_errors=True),
            )
        return len(infos)

    # -- multipart uploads ------------------------------------------------------------------

    def create_multipart(self, key: str) -> str:
        return self._call("create_multipart", key, lambda: self.storage.create_multipart(key))

    def upload_part(self, key: str, upload_id: str, number: int, data: bytes) -> UploadedPart:
        return self._call(
            "upload_part", key, lambda: self.storage.upload_part(key, upload_id, number, data)
        )

    def complete_multipart(self, key: str, upload_id: str, parts: Sequence[UploadedPart]) -> None:
        """Raises: AlreadyExistsError, NotFoundError (no such upload), StorageError."""
        self._call(
            "complete_multipart",
            key,
            lambda: self.storage.complete_multipart(key, upload_id, parts),
        )

    def abort_multipart(self, key: str, upload_id: str) -> None:
        self._call("abort_multipart", key, lambda: self.storage.abort_multipart(key, upload_id))

    def list_multipart_uploads(self, prefix: str) -> builtins.list[PendingUpload]:
        return self._call(
            "list_multipart_uploads",
            prefix,
            lambda: builtins.list(self.storage.list_multipart_uploads(prefix)),
        )
