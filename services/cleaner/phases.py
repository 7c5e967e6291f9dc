"""Where a clean's time goes, per phase, for the metrics and the ``cleaned table`` log line.

A clean (``worker.CleanWorker.clean``) is timed from the moment its table was queued:

- ``queue_wait``: queued until a clean thread took it;
- ``lock_acquire``: waiting for timeline-lock's grants (every lock section of the clean: the
  plan's append and the completion's);
- ``lock_release``: giving the leases back (the release is sent, not waited for);
- ``announce``: publishing the clean's timeline entries (``TimelineTransition``, the clean's
  result as the rest of the lake sees it) and waiting for the broker's acknowledgement;
- ``liveness``: asking heartbeat-monitor's view about pending instants;
- ``storage``: everything else of the clean: reading the timeline, listing, deleting,
  appending entries (under the lock or not).

``TimedCoordinator`` wraps the worker's coordinator and adds the time of each call to the
phases of the clean running on the calling thread (``measure``); a call made outside a
measured clean (none, today) is not counted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Final

from lakewarden.table import Coordinator
from lakewarden.table.coordinator import JobCommits, Lease, Liveness
from lakewarden.table.timeline_state import TimelineEntry

__all__ = ["PHASES", "TimedCoordinator", "measure"]

PHASES: Final = (
    "queue_wait",
    "lock_acquire",
    "lock_release",
    "announce",
    "liveness",
    "storage",
)

_current = threading.local()


def _add(phase: str, seconds: float) -> None:
    phases: dict[str, float] | None = getattr(_current, "phases", None)
    if phases is not None:
        phases[phase] = phases.get(phase, 0.0) + seconds


@contextmanager
def measure(queued_s: float) -> Iterator[dict[str, float]]:
    """Time the clean run in the ``with`` block on this thread: yields its phases (seconds,
    ``PHASES``), filled in when the block ends (``storage`` is what the others leave of the
    block's time; ``queue_wait`` is ``queued_s``)."""
    phases: dict[str, float] = dict.fromkeys(PHASES, 0.0)
    _current.phases = phases
    started = time.monotonic()
    try:
        yield phases
    finally:
        _current.phases = None
        spent = time.monotonic() - started
        others = sum(v for k, v in phases.items() if k != "storage")
        phases["storage"] = max(0.0, spent - others)
        phases["queue_wait"] = queued_s


class TimedCoordinator(Coordinator):
    """``coordinator`` with the time of its round trips counted into the current clean's
    phases (see the module doc); everything else is delegated unchanged."""

    def __init__(self, coordinator: Coordinator, clock: Callable[[], float] = time.monotonic):
        self.inner = coordinator
        self.clock = clock

    @contextmanager
    def _timed(self, phase: str) -> Iterator[None]:
        started = self.clock()
        try:
            yield
        finally:
            _add(phase, self.clock() - started)

    @contextmanager
    def lock(self, table_id: str, *, ttl_s: float = 30.0, wait_s: float = 30.0) -> Iterator[Lease]:
        section = self.inner.lock(table_id, ttl_s=ttl_s, wait_s=wait_s)
        with self._timed("lock_acquire"):
            lease = section.__enter__()
        # The block's own time is the caller's (storage): only entering and leaving count.
        try:
            yield lease
        except BaseException as err:
            with self._timed("lock_release"):
                suppress = section.__exit__(type(err), err, err.__traceback__)
            if not suppress:
                raise
        else:
            with self._timed("lock_release"):
                section.__exit__(None, None, None)

    def lock_ahead(self, table_id: str, *, ttl_s: float = 30.0) -> None:
        self.inner.lock_ahead(table_id, ttl_s=ttl_s)

    def drop_lock_ahead(self, table_id: str) -> None:
        self.inner.drop_lock_ahead(table_id)

    def heartbeat(self, table_id: str, instant: str, owner: str) -> AbstractContextManager[None]:
        return self.inner.heartbeat(table_id, instant, owner)

    def check_heartbeat(self, table_id: str, instant: str) -> None:
        self.inner.check_heartbeat(table_id, instant)

    def liveness(self, table_id: str, instant: str) -> Liveness:
        with self._timed("liveness"):
            return self.inner.liveness(table_id, instant)

    def executor_of(self, table_id: str, instant: str) -> str | None:
        with self._timed("liveness"):
            return self.inner.executor_of(table_id, instant)

    def monitors_liveness(self) -> bool:
        return self.inner.monitors_liveness()

    def never_heard_of(self, table_id: str, instant: str) -> bool:
        with self._timed("liveness"):
            return self.inner.never_heard_of(table_id, instant)

    def heartbeat_tolerance_s(self, table_id: str) -> float:
        return self.inner.heartbeat_tolerance_s(table_id)

    def register_table(self, table_id: str, uri: str) -> None:
        self.inner.register_table(table_id, uri)

    def before_requested(self, table_id: str, actor: str) -> None:
        self.inner.before_requested(table_id, actor)

    def announce(self, table_id: str, entry: TimelineEntry) -> None:
        with self._timed("announce"):
            self.inner.announce(table_id, entry)

    def job_commits(self) -> JobCommits | None:
        return self.inner.job_commits()

    def connect(self, *, writes: bool = True) -> None:
        self.inner.connect(writes=writes)

    def close(self) -> None:
        self.inner.close()
