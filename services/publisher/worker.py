"""One table's sync on a worker thread: open the table (cached), ``DeltaPublisher.sync``.

Several threads sync at once, each a different table (``PublishQueue`` hands a table to one
at a time), so a table's ``DeltaPublisher`` is only ever used by one thread at a time.

A table whose config says publishing is off is re-read on each sync (``publish enable`` may
turn it on at any time) and skipped.
"""

from __future__ import annotations

import logging
import time

from lakewarden.publish import DeltaPublisher, PublishResult
from lakewarden.settings import Settings
from lakewarden.storage import open_storage
from lakewarden.table.config import load_config
from lakewarden.table.timeline import Timeline
from lakewarden_services.publisher import metrics
from lakewarden_services.publisher.handler import Work

log = logging.getLogger(__name__)


class PublishWorker:
    """Publishes tables, called from several threads (never two for one table at once)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._publishers: dict[str, DeltaPublisher] = {}

    def publisher(self, uri: str) -> DeltaPublisher | None:
        """The table's publisher (kept: its timeline cache and snapshots make the next sync
        cheap), None while the table does not publish.

        Raises: NotATableError, ConfigurationError, StorageError."""
        found = self._publishers.get(uri)
        if found is not None:
            return found
        storage = open_storage(uri, self.settings)
        config = load_config(storage)
        if not config.publish.delta:
            return None
        found = DeltaPublisher(storage, config, Timeline(storage, table=config.name))
        self._publishers[uri] = found
        return found

    def sync(self, work: Work) -> PublishResult | None:
        """Publish ``work``'s table; None when it does not publish.

        Raises: whatever ``DeltaPublisher.sync`` raises (the table is synced again later)."""
        started = time.monotonic()
        try:
            publisher = self.publisher(work.table_uri)
            if publisher is None:
                metrics.SYNCS.labels("off").inc()
                return None
            result = publisher.sync()
        except Exception:
            metrics.SYNCS.labels("failed").inc()
            self._publishers.pop(work.table_uri, None)  # reopen next time
            raise
        finally:
            metrics.DURATION.observe(time.monotonic() - started)
        metrics.SYNCS.labels("published" if result.written else "current").inc()
        metrics.VERSIONS.inc(len(result.written))
        metrics.VERSION_LAG.set(result.status.lag)
        if result.written:
            log.info(
                "published table %s",
                work.table_id,
                extra={
                    "table": work.table_id,
                    "versions": f"{result.written[0]}-{result.written[-1]}",
                    "published_version": result.status.published_version,
                },
            )
        return result
