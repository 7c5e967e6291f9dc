"""Local filesystem primitives for the job commit's fast path.

Why not ``LocalStorage.rename``: it links, unlinks and fsyncs the destination directory per
file, which costs far more than the ``os.rename`` itself. A job commit renames
thousands of files into a few directories, so it renames without syncing and then fsyncs each
touched directory once, before the ``_SUCCESS`` summary (the job's durability point) is
written. A crash before that loses at most renames, which a resumed commit redoes.

The batch loops (``lstat_sizes``, ``rename_batch``) are the job commit's hot paths: one
system call per file, no exception on the success path.

Renames never replace: ``renameat2(RENAME_NOREPLACE)`` where the kernel and filesystem have it
(one system call, atomic: the file is at its source or at its destination, never both), else
``link`` + ``unlink`` (a crash between them leaves both names on one inode; the next rename
sees the same file and finishes the job).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence

from lakewarden.storage._keys import TEMP_PREFIX

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


def _load_renameat2() -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        func = libc.renameat2
    except (OSError, AttributeError):
        return None
    # No argtypes: ctypes then passes Python ints as C ints and bytes as char pointers
    # directly, which is measurably cheaper per call than converting through argtypes.
    func.restype = ctypes.c_int
    renameat2: Callable[..., int] = func
    return renameat2


_RENAMEAT2 = _load_renameat2()
_fallback = _RENAMEAT2 is None


def rename_noreplace(src: str, dst: str) -> None:
    """Move file ``src`` to ``dst`` unless ``dst`` exists.

    Raises:
        FileExistsError: ``dst`` exists (``src`` untouched).
        FileNotFoundError: ``src`` (or ``dst``'s directory) does not exist.
        OSError: other failures.
    """
    code = rename_noreplace_errno(os.fsencode(src), os.fsencode(dst))
    if code:
        raise OSError(code, os.strerror(code), src, None, dst)


def rename_noreplace_errno(src: bytes, dst: bytes) -> int:
    """``rename_noreplace`` for the hot loop: 0 on success, else the errno (no exception)."""
    global _fallback
    if not _fallback and _RENAMEAT2 is not None:
        if _RENAMEAT2(_AT_FDCWD, src, _AT_FDCWD, dst, _RENAME_NOREPLACE) == 0:
            return 0
        code = ctypes.get_errno()
        if code == errno.EEXIST:
            return _finish_interrupted_link(src, dst)
        if code not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            return code
        _fallback = True  # this filesystem cannot: link + unlink from now on
    try:
        _link_then_unlink(os.fsdecode(src), os.fsdecode(dst))
    except OSError as err:
        return err.errno or errno.EIO
    return 0


def _link_then_unlink(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except FileExistsError:
        if not _same_file(src, dst):
            raise
    os.unlink(src)


def _finish_interrupted_link(src: bytes, dst: bytes) -> int:
    """``dst`` exists. When it is ``src`` itself (a rename by link + unlink, here or through
    ``LocalStorage.rename``, was interrupted between the two), finish it: 0. Else EEXIST."""
    if not _same_file(os.fsdecode(src), os.fsdecode(dst)):
        return errno.EEXIST
    try:
        os.unlink(src)
    except FileNotFoundError:
        pass  # a concurrent resume finished it
    except OSError as err:
        return err.errno or errno.EIO
    return 0


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def regular_file_size(path: str) -> int | None:
    """Size of the regular file at ``path`` (a final symlink is not followed); None if absent.

    Raises: NotARegularFileError (a symlink, a directory, a device...)."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(st.st_mode):
        raise NotARegularFileError(path, st.st_mode)
    return st.st_size


class NotARegularFileError(OSError):
    """The path is a symbolic link, a directory or another non-regular file."""

    def __init__(self, path: str, mode: int) -> None:
        kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
        super().__init__(errno.EINVAL, f"{path} is {kind}")
        self.path = path
        self.is_symlink = stat.S_ISLNK(mode)


def make_dirs(path: str) -> None:
    """``mkdir -p``. Raises: NotADirectoryError/FileExistsError (a file is in the way)."""
    os.makedirs(path, exist_ok=True)


def create_unsynced(path: str, data: bytes) -> None:
    """Create the file ``path`` holding ``data`` unless it exists, without fsync: a hidden
    temporary file (``.lw-tmp-*``, which listings skip) linked into place, so readers see the
    whole content or nothing. For the job's staging records only (see ``CommitStore.
    write_staging``): nothing the completed instant names.

    Raises: FileExistsError (``path`` exists), OSError."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f"{TEMP_PREFIX}{uuid.uuid4().hex}")
    with open(tmp, "xb") as out:
        out.write(data)
    try:
        os.link(tmp, path)
    finally:
        os.unlink(tmp)


def fsync_file(path: str | os.PathLike[str]) -> None:
    """fsync one file written by someone else (pyarrow or Spark writing to a path): its data
    must be durable before a task commit accepts it, as ``TaskAttempt.create_file``'s are."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dirs(paths: Iterable[str]) -> None:
    """fsync each existing directory once (persists the names created or removed in it)."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# -- the hot loops of the job commit (one call per file, no exception on the success path) ----

# Outcomes of one rename in a batch.
RENAMED = 0
SOURCE_MISSING = 1
DESTINATION_EXISTS = 2


def lstat_sizes(
    base: str, keys: Sequence[str], stop: threading.Event | None, out: list[int | None]
) -> None:
    """Append to ``out`` the size of each regular file ``base + key`` (None when absent), all
    in one C-level ``map`` while every file exists (the common case), per key otherwise;
    stops early when ``stop`` is set.

    Raises: NotARegularFileError (naming the key: a symlink, a directory...)."""
    if stop is not None and stop.is_set():
        return
    paths = [base + key for key in keys]
    try:
        stats = list(map(os.lstat, paths))
    except (FileNotFoundError, NotADirectoryError):
        _lstat_one_by_one(keys, paths, stop, out)
        return
    if not all(map(stat.S_ISREG, [st.st_mode for st in stats])):
        for key, st in zip(keys, stats, strict=True):
            if not stat.S_ISREG(st.st_mode):
                raise NotARegularFileError(key, st.st_mode)
    out.extend([st.st_size for st in stats])


def _lstat_one_by_one(
    keys: Sequence[str],
    paths: list[str],
    stop: threading.Event | None,
    out: list[int | None],
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
            raise NotARegularFileError(key, st.st_mode)
        out.append(st.st_size)


def rename_batch(
    base: bytes,
    pairs: Sequence[tuple[str, str]],
    stop: threading.Event | None,
    out: list[int],
    dirs: set[str],
    on_error: Callable[[int, str, str], int],
) -> None:
    """Rename each ``(src, dst)`` under ``base`` without replacing, appending outcomes to
    ``out`` and the destination directories (keys) that gained a name to ``dirs`` (filled as
    it goes, so the caller still syncs them when ``on_error`` raises). A failed rename's errno
    goes to ``on_error``, which returns its outcome. Stops when ``stop`` is set or after the
    first outcome other than RENAMED."""
    rename = rename_noreplace_errno
    for src, dst in pairs:
        if stop is not None and stop.is_set():
            return
        code = rename(base + src.encode(), base + dst.encode())
        if code == 0:
            out.append(RENAMED)
            dirs.add(dst.rpartition("/")[0])
            continue
        out.append(on_error(code, src, dst))
        if out[-1] != RENAMED:
            return
        dirs.add(dst.rpartition("/")[0])
