"""The local filesystem backend: keys are files under a root directory.

How each guarantee of the contract is met:

- ``write``: the data goes to a temporary file in the key's directory, is fsynced, then
  ``os.replace``\\ d over the key (atomic on POSIX), and the directory is fsynced so the new
  name survives a crash.
- ``write_if_absent``: the same temporary file, then ``os.link(tmp, key)``, which fails with
  ``EEXIST`` if the key exists: the check and the creation are one system call. The temporary
  name is unlinked afterwards whatever happened.
- ``rename``: ``os.link`` then ``os.unlink`` of the source, so an existing destination is never
  replaced. A crash between the two leaves both names on one inode; repeating the rename
  finishes it.
- Temporary files are named ``.lw-tmp-<uuid>``; keys may not have such segments, so listings
  skip them without ambiguity. A crash between creating one and unlinking it leaves it
  behind: ``list_temporary`` finds those, ``delete_temporary`` removes them (the cleaner).

Directories are not objects: they are created on demand and never listed; a key whose path
is a directory (because longer keys exist under it) is reported as absent on read and
refused on write with ``InvalidKeyError``. Empty directories are left behind by ``delete``
(removing them would race with concurrent writers creating files in them).
"""

from __future__ import annotations

import errno
import os
import stat
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

from lakewarden.storage import (
    AlreadyExistsError,
    InvalidKeyError,
    NotFoundError,
    ObjectInfo,
    Storage,
    StorageCapabilities,
    StorageIOError,
    check_temporary_key,
)
from lakewarden.storage._keys import (
    TEMP_PREFIX,
    check_directory_prefix,
    check_key,
    check_prefix,
)
from lakewarden.storage._walk import LevelEntry, ordered_walk

_CAPABILITIES = StorageCapabilities(
    rename=True, append=True, local_paths=True, conditional_put=True, direct_file_access=True
)

# Errors that mean "a path component is a file where a directory should be, or vice versa":
# the key collides with the directory structure of other keys.
_SHAPE_ERRNOS = (errno.EISDIR, errno.ENOTDIR)


def _io_error(err: OSError, op: str, key: str) -> StorageIOError:
    return StorageIOError(f"local {op} of {key!r} failed: {err}", key=key)


def _shape_error(err: OSError, key: str) -> InvalidKeyError:
    return InvalidKeyError(
        f"key {key!r} collides with the directory layout of other keys on local storage "
        f"({err.strerror}): a key cannot be both an object and a prefix of other keys.",
        key=key,
    )


class LocalStorage(Storage):
    """Objects as files under ``root`` (created on first write)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).absolute()
        self.uri = self.root.as_uri()
        # Reads and listings join plain strings: a validated key (``check_key``: relative, no
        # empty, ``.`` or ``..`` segment, no backslash) names the same file as ``_path``'s
        # ``Path``, and a timeline reload (a read and a listing) spent a third of its time
        # building ``Path`` objects.
        self._root = str(self.root)

    def __repr__(self) -> str:
        return f"LocalStorage({str(self.root)!r})"

    @property
    def capabilities(self) -> StorageCapabilities:
        return _CAPABILITIES

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key).split("/"))

    def _file(self, key: str) -> str:
        """``_path(key)`` as a string (see ``__init__``)."""
        return f"{self._root}/{check_key(key)}"

    # -- reads --------------------------------------------------------------------------------

    def read(self, key: str) -> bytes:
        path = self._file(key)
        try:
            with open(path, "rb") as file:
                return file.read()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as err:
            raise NotFoundError(f"no object {key!r} in {self.uri}", key=key) from err
        except OSError as err:
            raise _io_error(err, "read", key) from err

    def read_range(self, key: str, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise ValueError(f"read_range of {key!r}: offset {offset} and length {length}")
        path = self._file(key)
        try:
            with open(path, "rb") as file:
                file.seek(offset)
                return file.read(length)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as err:
            raise NotFoundError(f"no object {key!r} in {self.uri}", key=key) from err
        except OSError as err:
            raise _io_error(err, "read", key) from err

    def stat(self, key: str) -> ObjectInfo:
        path = self._path(key)
        try:
            st = path.stat()
        except (FileNotFoundError, NotADirectoryError) as err:
            raise NotFoundError(f"no object {key!r} in {self.uri}", key=key) from err
        except OSError as err:
            raise _io_error(err, "stat", key) from err
        if not stat.S_ISREG(st.st_mode):
            raise NotFoundError(f"no object {key!r} in {self.uri} (it is a directory)", key=key)
        return ObjectInfo(key=key, size=st.st_size, mtime_ms=st.st_mtime_ns // 1_000_000)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def local_path(self, key: str) -> str | None:
        return str(self._path(key))

    def list(self, prefix: str = "", *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        """See ``Storage.list``. Lazy: directories are read one at a time, in key order.

        Raises: InvalidKeyError (bad prefix), StorageIOError (a directory cannot be read).
        """
        prefix = check_prefix(prefix)
        if start_after is None:
            return ordered_walk(self._list_level, prefix, None)

        def list_level(base: str, partial: str, hint: str | None) -> Iterable[LevelEntry]:
            if hint is None or not start_after.startswith(base):
                return self._list_level(base, partial, hint)
            segment = start_after[len(base) :].split("/", 1)[0]
            return _scan_level_after(self._directory(base), base, partial, hint, segment)

        return ordered_walk(list_level, prefix, start_after)

    def _directory(self, base: str) -> str:
        """The directory of level ``base`` (``""`` or a validated prefix ending in ``/``)."""
        return f"{self._root}/{base[:-1]}" if base else self._root

    def _list_level(self, base: str, partial: str, hint: str | None) -> Iterable[LevelEntry]:
        return _scan_level(self._directory(base), base, partial, hint)

    def list_temporary(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """See ``Storage.list_temporary``: one walk of the directories under ``prefix``.

        Raises: InvalidKeyError (bad prefix)."""
        if prefix:
            check_directory_prefix(prefix)
        top = self._directory(prefix)
        for directory, _dirs, names in os.walk(top):
            base = os.path.relpath(directory, self._root).replace(os.sep, "/")
            for name in names:
                if not name.startswith(TEMP_PREFIX):
                    continue
                try:
                    st = os.lstat(os.path.join(directory, name))
                except FileNotFoundError:
                    continue  # its write finished (or it was deleted) meanwhile
                if stat.S_ISREG(st.st_mode):
                    key = name if base == "." else f"{base}/{name}"
                    yield ObjectInfo(key=key, size=st.st_size, mtime_ms=st.st_mtime_ns // 10**6)

    def delete_temporary(self, key: str) -> None:
        """See ``Storage.delete_temporary``."""
        check_temporary_key(key)
        try:
            os.unlink(f"{self._root}/{key}")
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as err:
            raise _io_error(err, "delete", key) from err

    # -- writes -------------------------------------------------------------------------------

    def write(self, key: str, data: bytes) -> None:
        path = self._path(key)
        tmp = self._write_temp(path, key, data)
        try:
            os.replace(tmp, path)
        except OSError as err:
            _unlink_quietly(tmp)
            if err.errno in _SHAPE_ERRNOS:
                raise _shape_error(err, key) from err
            raise _io_error(err, "write", key) from err
        _fsync_dir(path.parent, key)

    def write_if_absent(self, key: str, data: bytes) -> None:
        path = self._path(key)
        tmp = self._write_temp(path, key, data)
        try:
            os.link(tmp, path)
        except FileExistsError as err:
            if path.is_dir():
                raise _shape_error(err, key) from err
            raise AlreadyExistsError(
                f"object {key!r} already exists in {self.uri}", key=key
            ) from err
        except OSError as err:
            if err.errno in _SHAPE_ERRNOS:
                raise _shape_error(err, key) from err
            raise _io_error(err, "write_if_absent", key) from err
        finally:
            _unlink_quietly(tmp)
        _fsync_dir(path.parent, key)

    def _write_temp(self, path: Path, key: str, data: bytes) -> Path:
        """A fully written, fsynced temporary file beside ``path`` (same filesystem, so it can
        be linked or renamed onto ``path``)."""
        _make_parents(path, key)
        tmp = path.with_name(f"{TEMP_PREFIX}{uuid.uuid4().hex}")
        try:
            with open(tmp, "xb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
        except OSError as err:
            _unlink_quietly(tmp)
            raise _io_error(err, "write", key) from err
        return tmp

    def append(self, key: str, data: bytes) -> None:
        path = self._path(key)
        _make_parents(path, key)
        try:
            with open(path, "ab") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
        except OSError as err:
            if err.errno in _SHAPE_ERRNOS:
                raise _shape_error(err, key) from err
            raise _io_error(err, "append", key) from err

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return  # absent (a directory is not an object): deleting is idempotent
        except OSError as err:
            if err.errno == errno.EPERM and path.is_dir():
                return  # Linux reports unlink of a directory as EPERM
            raise _io_error(err, "delete", key) from err

    def rename(self, src: str, dst: str) -> None:
        """See ``Storage.rename``. Repeating a rename interrupted between its link and its
        unlink completes it instead of reporting ``AlreadyExistsError``."""
        src_path, dst_path = self._path(src), self._path(dst)
        if not src_path.is_file():
            raise NotFoundError(f"cannot rename {src!r}: no such object in {self.uri}", key=src)
        _make_parents(dst_path, dst)
        try:
            os.link(src_path, dst_path)
        except FileExistsError as err:
            if dst_path.is_dir():
                raise _shape_error(err, dst) from err
            if not _same_file(src_path, dst_path):
                raise AlreadyExistsError(
                    f"cannot rename {src!r} to {dst!r}: the destination exists in {self.uri}",
                    key=dst,
                ) from err
        except FileNotFoundError as err:
            raise NotFoundError(
                f"cannot rename {src!r}: no such object in {self.uri}", key=src
            ) from err
        except OSError as err:
            if err.errno in _SHAPE_ERRNOS:
                raise _shape_error(err, dst) from err
            raise _io_error(err, "rename", src) from err
        try:
            src_path.unlink()
        except FileNotFoundError:
            pass  # a concurrent identical rename finished first: same outcome
        except OSError as err:
            raise _io_error(err, "rename", src) from err
        _fsync_dir(dst_path.parent, dst)


def _scan_level(directory: str, base: str, partial: str, hint: str | None) -> list[LevelEntry]:
    """The files and subdirectories of ``directory`` (key prefix ``base``) whose names start
    with ``partial`` and are greater than ``hint``; temporary files are skipped.

    Names are filtered before anything is stat'ed: listing the tail of a 100k-entry timeline
    directory then costs one ``stat`` per entry returned, not per entry present."""
    if hint is not None:
        return _scan_level_after(directory, base, partial, hint)
    entries: list[LevelEntry] = []
    try:
        with os.scandir(directory) as scan:
            for entry in scan:
                name = entry.name
                if (
                    name.startswith(TEMP_PREFIX)
                    or not name.startswith(partial)
                    or (hint is not None and name <= hint)
                ):
                    continue
                try:
                    if entry.is_dir(follow_symlinks=False):
                        entries.append(LevelEntry(name, True))
                    elif entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        entries.append(LevelEntry(name, False, st.st_size, st.st_mtime_ns // 10**6))
                except FileNotFoundError:
                    continue  # deleted while we listed: it is simply not there
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as err:
        raise _io_error(err, "list", base) from err
    return entries


def _scan_level_after(
    directory: str, base: str, partial: str, hint: str, segment: str | None = None
) -> list[LevelEntry]:
    """``_scan_level`` for a listing that starts after ``hint`` (the tail of a timeline):
    ``os.listdir`` and one comparison per name in C-level list building, then an ``lstat``
    only for the names kept. A per-entry ``scandir`` loop cost 3x more on a 10k-entry
    directory, and the timeline confirms its end with such a listing on every load.

    ``segment``: the listing's ``start_after`` at this level (``level_hint``'s input). Of the
    names between ``hint`` and it, only its proper prefixes can hold later keys (as
    directories: ``a/x`` sorts after ``a-b``); the others are not ``lstat``-ed: the hint of a
    timeline's end (``0000000000000000001`` for ``00000000000000000012.json``) let through up
    to ten entries the walk then dropped, an ``lstat`` each on every reload."""
    try:
        names = [n for n in os.listdir(directory) if n > hint and n.startswith(partial)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as err:
        raise _io_error(err, "list", base) from err
    if segment is not None:
        names = [n for n in names if n > segment or segment.startswith(n)]
    entries: list[LevelEntry] = []
    for name in names:
        if name.startswith(TEMP_PREFIX):
            continue
        try:
            st = os.lstat(f"{directory}/{name}")
        except FileNotFoundError:
            continue  # deleted while we listed: it is simply not there
        except OSError as err:
            raise _io_error(err, "list", base + name) from err
        if stat.S_ISDIR(st.st_mode):
            entries.append(LevelEntry(name, True))
        elif stat.S_ISREG(st.st_mode):
            entries.append(LevelEntry(name, False, st.st_size, st.st_mtime_ns // 10**6))
    return entries


def _make_parents(path: Path, key: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as err:
        raise _shape_error(err, key) from err
    except OSError as err:
        raise _io_error(err, "mkdir", key) from err


def _fsync_dir(directory: Path, key: str) -> None:
    """Persist a directory entry just created (without it a crash can forget the new name)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as err:
        raise _io_error(err, "fsync", key) from err
    try:
        os.fsync(fd)
    except OSError as err:
        raise _io_error(err, "fsync", key) from err
    finally:
        os.close(fd)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
