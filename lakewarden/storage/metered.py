"""``MeteredStorage``: counts and times every call per operation (the one wrapper all store
calls of a job commit go through, so a stage report can say how many calls it made and how
long they took). Thread-safe; adds two clock reads and a lock per call.

Listings are counted as one call whose time includes reading every page.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from lakewarden.storage import Storage
from lakewarden.storage._forwarding import ForwardingStorage, Operation

T = TypeVar("T")

__all__ = ["MeteredStorage", "OperationStats"]


@dataclass(frozen=True, slots=True)
class OperationStats:
    """Totals for one operation: calls made, how many raised, seconds spent in them."""

    calls: int = 0
    errors: int = 0
    seconds: float = 0.0

    def plus(self, *, failed: bool, seconds: float) -> OperationStats:
        return OperationStats(self.calls + 1, self.errors + int(failed), self.seconds + seconds)


class MeteredStorage(ForwardingStorage):
    """Wraps ``inner``; ``stats()`` gives the totals so far by operation."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()
        self._stats: dict[str, OperationStats] = {}

    def __repr__(self) -> str:
        return f"MeteredStorage({self.inner!r})"

    def stats(self) -> dict[str, OperationStats]:
        """Totals by operation name (only operations called at least once)."""
        with self._lock:
            return dict(self._stats)

    def _invoke(self, op: Operation, key: str, call: Callable[[], T]) -> T:
        start = time.perf_counter()
        failed = True
        try:
            result = call()
            failed = False
            return result
        finally:
            elapsed = time.perf_counter() - start
            with self._lock:
                self._stats[op] = self._stats.get(op, OperationStats()).plus(
                    failed=failed, seconds=elapsed
                )
