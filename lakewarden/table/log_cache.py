"""Log file bytes for a read, and a bounded cache of scanned log files across reads.

``log_bytes`` memory-maps a log file when the store allows direct file access: the scan's CRC
check and the blocks' Arrow decoding then read the page cache in place, where
``Storage.read`` first copies the file (a tenth of a merged read's CPU time went into copying
~20 MB of log files).

``LogCache`` keeps the scans (``lakewarden.logfile.LogScan``: the valid blocks as views of the
file's bytes, the damaged regions) of the log files a table's reads met, so a later read of a
slice that names them neither reads nor CRC-checks them again, and decodes their blocks once
(``LogBlock.records`` keeps what it decoded). A log file is written once, put-if-absent, under
a name that carries its instant and write token, so a name is never reused for other bytes;
still, every hit is checked against ``Storage.stat`` (size and modification time): a file
appended to in place (older tables' logs, a zombie attempt) or replaced is scanned again.
What a read *takes* from a scan is decided afresh by every read from its snapshot's
statistics, so a new deltacommit is seen at once (its log files are new names).

The cache serves stores with direct file access only: there ``stat`` is one system call and
the cached bytes are memory maps (page cache, not heap). On S3 the check would be one more
request per file, so reads there scan every time.
"""

from __future__ import annotations

import os
import stat
import threading
from collections import OrderedDict

import pyarrow as pa

from lakewarden.logfile import LogScan, scan_log
from lakewarden.storage import Storage

__all__ = ["DEFAULT_MAX_BYTES", "LogCache", "log_bytes"]

DEFAULT_MAX_BYTES = 256 * 1024 * 1024


def log_bytes(storage: Storage, key: str) -> bytes | pa.Buffer:
    """The bytes of a log file: a memory map when the store allows direct file access (a log
    file is never rewritten, and the decoded records keep the mapping alive), else
    ``Storage.read``.

    Raises: StorageError."""
    path = storage.local_path(key) if storage.capabilities.direct_file_access else None
    mapped = _mapped(path) if path is not None else None
    return mapped if mapped is not None else storage.read(key)


def _mapped(path: str) -> pa.Buffer | None:
    """The file at ``path`` memory-mapped; None when it cannot be (``Storage.read`` then
    names what is wrong: missing, unreadable)."""
    try:
        with pa.memory_map(path) as mapped:
            return mapped.read_buffer()
    except OSError:
        return None


def _version(path: str) -> tuple[int, int] | None:
    """(size, modification time in ms) of the regular file at ``path``, as ``Storage.stat``
    gives them (one system call, where ``Storage.stat`` also checks the key and builds a
    path); None when there is no such file."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return info.st_size, info.st_mtime_ns // 1_000_000


class LogCache:
    """Scans of log files by key, least recently used first out past ``max_bytes`` (the
    files' sizes). Safe to share between threads."""

    __slots__ = ("_entries", "_lock", "_size", "hits", "max_bytes", "misses")

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[str, tuple[tuple[int, int], LogScan]] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def scan(self, storage: Storage, key: str) -> LogScan:
        """The scan of log file ``key`` of ``storage``: cached when its size and modification
        time are those it was scanned with, else scanned now (and kept when it fits).

        Raises: StorageError (NotFoundError: the file is gone)."""
        path = storage.local_path(key) if storage.capabilities.direct_file_access else None
        if path is None:
            return scan_log(log_bytes(storage, key), key)
        version = _version(path)
        if version is None:  # gone or not a file: the store's own stat names the error
            info = storage.stat(key)
            version = (info.size, info.mtime_ms)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] == version:
                self._entries.move_to_end(key)
                self.hits += 1
                return entry[1]
            self.misses += 1
        mapped = _mapped(path)
        scanned = scan_log(mapped if mapped is not None else storage.read(key), key)
        if scanned.size == version[0]:  # else it changed while we read: keep nothing
            self._put(key, version, scanned)
        return scanned

    def __len__(self) -> int:
        return len(self._entries)

    def _put(self, key: str, version: tuple[int, int], scanned: LogScan) -> None:
        if scanned.size > self.max_bytes:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._size -= old[1].size
            self._entries[key] = (version, scanned)
            self._size += scanned.size
            while self._size > self.max_bytes:
                _, (_, evicted) = self._entries.popitem(last=False)
                self._size -= evicted.size
