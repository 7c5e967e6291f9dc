"""The batched store calls of the job commit: sizes of many files (validation) and renames
of many files (placement), on the local fast path (``_localfs``: one system call per file)
or through the ``Storage`` contract, metered as one sample per item."""

from __future__ import annotations

import errno
import functools
import os
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lakewarden.commit import _localfs
from lakewarden.commit._localfs import DESTINATION_EXISTS, RENAMED
from lakewarden.storage import StorageIOError

if TYPE_CHECKING:
    from lakewarden.commit._store import CommitStore


def sizes(
    store: CommitStore, keys: Sequence[str], stop: threading.Event | None = None
) -> list[int | None]:
    """Sizes of ``keys`` (None when absent), stopping early when ``stop`` is set.

    Raises: NotARegularFileError (local: a symlink or directory), StorageError."""
    start = time.perf_counter()
    out: list[int | None] = []
    try:
        if store.fast:
            _localfs.lstat_sizes(store.path(""), keys, stop, out)
        else:
            for key in keys:
                if stop is not None and stop.is_set():
                    break
                out.append(store.size_of(key))
    finally:
        store.metered.record("stat", time.perf_counter() - start, samples=max(len(out), 1))
    return out


def sizes_and_etags(
    store: CommitStore, keys: Sequence[str], stop: threading.Event | None = None
) -> list[tuple[int, str | None] | None]:
    """(size, etag) of ``keys`` (None when absent; the etag None where the store has none),
    stopping early when ``stop`` is set.

    Raises: NotARegularFileError (local: a symlink or directory), StorageError."""
    if store.fast:
        return [None if size is None else (size, None) for size in sizes(store, keys, stop)]
    start = time.perf_counter()
    out: list[tuple[int, str | None] | None] = []
    try:
        for key in keys:
            if stop is not None and stop.is_set():
                break
            out.append(store.stat_of(key))
    finally:
        store.metered.record("stat", time.perf_counter() - start, samples=max(len(out), 1))
    return out


def renames(
    store: CommitStore, pairs: Sequence[tuple[str, str]], stop: threading.Event | None = None
) -> list[int]:
    """Rename each ``(src, dst)``; outcomes in order, stopping early when ``stop`` is set
    or after the first outcome other than RENAMED (the caller decides about it)."""
    start = time.perf_counter()
    out: list[int] = []
    try:
        if store.fast:
            _renames_fast(store, pairs, stop, out)
        else:
            for src, dst in pairs:
                if stop is not None and stop.is_set():
                    break
                out.append(store.rename_outcome(src, dst))
                if out[-1] != RENAMED:
                    break
    finally:
        store.metered.record("rename", time.perf_counter() - start, samples=max(len(out), 1))
    return out


def _renames_fast(
    store: CommitStore,
    pairs: Sequence[tuple[str, str]],
    stop: threading.Event | None,
    out: list[int],
) -> None:
    """The local fast path: the touched directories are collected per batch and synced
    once before ``_SUCCESS``."""
    dirs: set[str] = set()
    try:
        base = os.fsencode(store.path(""))
        _localfs.rename_batch(
            base, pairs, stop, out, dirs, functools.partial(_rename_failed, store)
        )
    finally:
        store.mark_dirty(store.path(d) for d in dirs)


def _rename_failed(store: CommitStore, code: int, src: str, dst: str) -> int:
    """The outcome of a fast rename that returned ``code``. Raises: StorageIOError."""
    if code == errno.EEXIST:
        return DESTINATION_EXISTS
    if code in (errno.ENOENT, errno.ENOTDIR):
        return store.rename_outcome(src, dst)  # tells a missing source from a missing directory
    raise StorageIOError(f"local rename of {src!r} to {dst!r} failed: {os.strerror(code)}", key=src)
