"""One table's clean on a worker thread: open the table (cached), ``Table.clean``, count.

The coordinator is timeline-lock's and heartbeat-monitor's (Kafka or refuse: no embedded
fallback), so the table lock is the one every writer takes and liveness is the monitor's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from lakewarden.settings import Settings
from lakewarden.storage import Storage, open_storage
from lakewarden.storage.faults import FaultyStorage
from lakewarden.table import CleanPolicy, CleanResult, Coordinator, Table
from lakewarden.table.config import load_config
from lakewarden_services.cleaner import metrics
from lakewarden_services.cleaner.phases import PHASES, TimedCoordinator, measure
from lakewarden_services.cleaner.queue import Work
from lakewarden_services.cleaner.settings import CleanerSettings

log = logging.getLogger(__name__)

ACTOR = "cleaner"


class CleanWorker:
    """Cleans one table at a time (called from one thread)."""

    def __init__(
        self,
        settings: Settings,
        coordinator: Callable[[], Coordinator],
        cleaner_settings: CleanerSettings | None = None,
        *,
        instance: str = "0",
    ) -> None:
        self.settings = settings
        self.coordinator = coordinator
        self.cleaner_settings = cleaner_settings or CleanerSettings()
        self.actor = f"{ACTOR}-{instance}"
        self._tables: dict[str, Table] = {}
        self._timed: TimedCoordinator | None = None
        self._making = threading.Lock()

    def _coordinator(self) -> TimedCoordinator:
        with self._making:  # the clean thread and ``warm_up`` may ask at once
            if self._timed is None:
                self._timed = TimedCoordinator(self.coordinator())
            return self._timed

    def warm_up(self) -> None:
        """Build the coordinator and connect the clients a clean uses (the lock's transport,
        the timeline announcer) now, so that the instance's first clean does not pay for
        them: a new instance's first clean otherwise waits about a second for its
        connections, while the tables it just took over wait. A clean neither beats nor
        registers tables, so the writers' clients are left. Never raises (what failed
        connects at first use)."""
        try:
            self._coordinator().connect(writes=False)
        except Exception:
            log.exception("clean worker not warmed up; its first clean connects")

    def table(self, uri: str) -> Table:
        """The table at ``uri`` (opened once: its timeline cache makes the next clean cheap).

        Raises: NotATableError, ConfigurationError, StorageError."""
        table = self._tables.get(uri)
        if table is None:
            storage = self._storage(uri)
            table = Table(
                storage, load_config(storage), coordinator=self._coordinator(), actor=self.actor
            )
            self._tables[uri] = table
        return table

    def _storage(self, uri: str) -> Storage:
        storage = open_storage(uri, self.settings)
        hooks = self.cleaner_settings
        if hooks.store_latency_ms > 0:
            storage = FaultyStorage(storage, latency_s=hooks.store_latency_ms / 1000)
        if hooks.delete_delay_s > 0:
            storage = FaultyStorage(storage, latency_s=hooks.delete_delay_s, latency_ops={"delete"})
        return storage

    def clean(self, work: Work) -> CleanResult:
        """Clean ``work``'s table; counts go to the metrics.

        Raises: whatever ``Table.clean`` raises (the table is cleaned again later)."""
        started = time.monotonic()
        try:
            with measure(max(0.0, started - work.queued_at)) as phases:
                table = self.table(work.table_uri)
                policy = (
                    CleanPolicy.parse(work.policy, base=table.config.clean_policy)
                    if work.policy
                    else None
                )
                result = table.clean(
                    policy, delete_orphans=work.delete_orphans, dead=frozenset(work.dead)
                )
        except Exception:
            metrics.CLEANS.labels("failed").inc()
            self._tables.pop(work.table_uri, None)  # reopen next time (a moved or broken table)
            raise
        finally:
            metrics.DURATION.observe(time.monotonic() - started)
            for phase in PHASES:
                metrics.PHASE.labels(phase).observe(phases[phase])
        metrics.CLEANS.labels("cleaned" if result.instant else "nothing").inc()
        metrics.FILES_DELETED.inc(result.files_deleted)
        metrics.BYTES_DELETED.inc(result.bytes_deleted)
        metrics.UPLOADS_ABORTED.inc(result.uploads_aborted)
        metrics.ROLLBACKS.inc(len(result.rolled_back))
        metrics.PLANS_CANCELLED.inc(len(result.cancelled))
        log.info(
            "cleaned table %s",
            work.table_id,
            extra={
                "table": work.table_id,
                "instant": result.instant,
                "files_deleted": result.files_deleted,
                "bytes_deleted": result.bytes_deleted,
                "rolled_back": ",".join(result.rolled_back),
                "cancelled": ",".join(result.cancelled),
                "why": "; ".join(work.why[:3]),
                **{f"{phase}_ms": round(phases[phase] * 1000, 1) for phase in PHASES},
            },
        )
        return result
