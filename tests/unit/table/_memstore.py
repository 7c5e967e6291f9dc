"""A small, thread-safe in-memory ``Storage`` for timeline tests. It injects no faults: a test
wraps it in ``lakewarden.storage.faults.FaultyStorage`` to race a writer (``before``) or lose a
reply (``lose_reply``), and lets the racing "other writer" use the inner store directly.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Iterator

from lakewarden.storage import (
    AlreadyExistsError,
    NotFoundError,
    ObjectInfo,
    Storage,
    StorageCapabilities,
)

# Neither rename nor multipart uploads: writes on it have no private staging.
_CAPABILITIES = StorageCapabilities(conditional_put=True)


class MemStorage(Storage):
    def __init__(self) -> None:
        self.uri = "mem://"
        self._lock = threading.RLock()
        self._objects: dict[str, bytes] = {}
        self._keys: list[str] = []
        self.calls: dict[str, int] = {}
        self.reads: list[str] = []  # keys read successfully, in order

    @property
    def capabilities(self) -> StorageCapabilities:
        return _CAPABILITIES

    def _count(self, op: str) -> None:
        self.calls[op] = self.calls.get(op, 0) + 1

    def _put(self, key: str, data: bytes) -> None:
        if key not in self._objects:
            bisect.insort(self._keys, key)
        self._objects[key] = bytes(data)

    def read(self, key: str) -> bytes:
        with self._lock:
            self._count("read")
            try:
                data = self._objects[key]
            except KeyError:
                raise NotFoundError(f"no object {key}", key=key) from None
            self.reads.append(key)
            return data

    def write(self, key: str, data: bytes) -> None:
        with self._lock:
            self._count("write")
            self._put(key, data)

    def write_if_absent(self, key: str, data: bytes) -> None:
        with self._lock:
            self._count("write_if_absent")
            if key in self._objects:
                raise AlreadyExistsError(f"object {key} exists", key=key)
            self._put(key, data)

    def list(self, prefix: str = "", *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        with self._lock:
            self._count("list")
            lo = bisect.bisect_left(self._keys, prefix)
            if start_after is not None:
                lo = max(lo, bisect.bisect_right(self._keys, start_after))
            keys = []
            for key in self._keys[lo:]:
                if not key.startswith(prefix):
                    break
                keys.append(key)
            infos = [ObjectInfo(k, len(self._objects[k]), 0) for k in keys]
        return iter(infos)

    def stat(self, key: str) -> ObjectInfo:
        with self._lock:
            if key not in self._objects:
                raise NotFoundError(f"no object {key}", key=key)
            return ObjectInfo(key, len(self._objects[key]), int(time.time() * 1000))

    def exists(self, key: str) -> bool:
        with self._lock:
            return key in self._objects

    def delete(self, key: str) -> None:
        with self._lock:
            if self._objects.pop(key, None) is not None:
                self._keys.remove(key)

    def rename(self, src: str, dst: str) -> None:
        with self._lock:
            if src not in self._objects:
                raise NotFoundError(f"no object {src}", key=src)
            if dst in self._objects:
                raise AlreadyExistsError(f"object {dst} exists", key=dst)
            self._put(dst, self._objects[src])
            self.delete(src)

    def append(self, key: str, data: bytes) -> None:
        with self._lock:
            self._put(key, self._objects.get(key, b"") + data)

    def local_path(self, key: str) -> str | None:
        return None
