"""``CallRecorder``: a storage wrapper that records every call (operation, key), so a test or
a benchmark can say which objects a piece of code read, e.g. that a job commit whose
manifests all came in events issued no read of a manifest."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from lakewarden.storage import Storage
from lakewarden.storage._forwarding import ForwardingStorage, Operation

T = TypeVar("T")


class CallRecorder(ForwardingStorage):
    """Forwards to ``inner`` and records ``(operation, key)`` of every call (thread-safe)."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()
        self.calls: list[tuple[Operation, str]] = []

    def _invoke(self, op: Operation, key: str, call: Callable[[], T]) -> T:
        with self._lock:
            self.calls.append((op, key))
        return call()

    def keys(self, op: Operation, *, containing: str = "") -> list[str]:
        """The keys of the recorded ``op`` calls whose key contains ``containing``."""
        with self._lock:
            return [key for name, key in self.calls if name == op and containing in key]

    def clear(self) -> None:
        with self._lock:
            self.calls.clear()
