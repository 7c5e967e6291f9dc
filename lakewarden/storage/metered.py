"""``MeteredStorage``: the one wrapper that counts and times store calls.

Every call through it is recorded as ``<prefix><operation>``: one call, its seconds, whether
it failed. ``NotFoundError`` is an answer ("absent"), not a failure of the store. Listings
count as one call whose time includes reading every page.

Where the totals go is the caller's choice (a ``Recorder``): by default ``OperationTotals``
(read with ``stats()``); the job committer passes its ``CommitStatistics``, so a stage report
and ``_SUCCESS`` say how many calls it made and how long they took. Calls that cannot go
through the ``Storage`` interface (the committer's local fast path: one ``renameat2`` per
file, directory syncs) are metered through the same wrapper with ``timed`` and ``record``.

Thread-safe as long as the recorder is; adds two clock reads per call.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from lakewarden.storage import NotFoundError, Storage
from lakewarden.storage._forwarding import ForwardingStorage, Operation

T = TypeVar("T")

__all__ = ["MeteredStorage", "OperationStats", "OperationTotals", "Recorder"]


class Recorder(Protocol):
    """Where a metered call is recorded (``CommitStatistics`` is one)."""

    def record(self, name: str, seconds: float, *, failed: bool = False, samples: int = 1) -> None:
        """Record ``samples`` calls of ``name`` that took ``seconds`` in total."""


@dataclass(frozen=True, slots=True)
class OperationStats:
    """Totals for one operation: calls made, how many raised, seconds spent in them."""

    calls: int = 0
    errors: int = 0
    seconds: float = 0.0

    def plus(self, *, failed: bool, seconds: float, samples: int = 1) -> OperationStats:
        return OperationStats(
            self.calls + samples, self.errors + int(failed), self.seconds + seconds
        )


class OperationTotals:
    """The default recorder: totals by name, thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats: dict[str, OperationStats] = {}

    def record(self, name: str, seconds: float, *, failed: bool = False, samples: int = 1) -> None:
        with self._lock:
            self._stats[name] = self._stats.get(name, OperationStats()).plus(
                failed=failed, seconds=seconds, samples=samples
            )

    def stats(self) -> dict[str, OperationStats]:
        with self._lock:
            return dict(self._stats)


class MeteredStorage(ForwardingStorage):
    """Wraps ``inner``; records every call in ``recorder`` as ``prefix + operation``."""

    def __init__(
        self, inner: Storage, *, recorder: Recorder | None = None, prefix: str = ""
    ) -> None:
        super().__init__(inner)
        self.recorder: Recorder = recorder if recorder is not None else OperationTotals()
        self.prefix = prefix

    def __repr__(self) -> str:
        return f"MeteredStorage({self.inner!r})"

    def stats(self) -> dict[str, OperationStats]:
        """Totals by operation name (only operations called at least once), when the
        recorder is the default ``OperationTotals``.

        Raises: TypeError (another recorder: read the totals from it)."""
        if not isinstance(self.recorder, OperationTotals):
            raise TypeError(f"the totals are in {self.recorder!r}, not in this wrapper")
        return self.recorder.stats()

    def timed(self, op: str, call: Callable[[], T]) -> T:
        """Run ``call`` (a store call made outside the ``Storage`` interface) metered as
        ``op``."""
        start = time.perf_counter()
        failed = True
        try:
            result = call()
            failed = False
            return result
        except NotFoundError:
            failed = False  # an answer ("absent"), not a failure of the store
            raise
        finally:
            self.record(op, time.perf_counter() - start, failed=failed)

    def record(self, op: str, seconds: float, *, failed: bool = False, samples: int = 1) -> None:
        """Record ``samples`` calls of ``op`` made outside this wrapper (a batch on the local
        fast path) that took ``seconds`` in total."""
        self.recorder.record(self.prefix + op, seconds, failed=failed, samples=samples)

    def _invoke(self, op: Operation, key: str, call: Callable[[], T]) -> T:
        return self.timed(op, call)
