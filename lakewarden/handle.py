"""``TableHandle``: an opened table, as everything that commits to a table needs it.

    handle = TableHandle(storage, load_config(storage), coordinator=coordinator)
    handle.state()                                  # the timeline folded to its tail

An opened table is its storage, its config, its timeline log, the coordinator its commits take
the lock from, the actor its entries name and the settings of this process. Opening one also
does what every writer of the table must do before its first entry:

1. the timeline publishes after each ``completed`` entry this process appends
   (``lakewarden.publish.attach``): the read manifest the JVM side reads, and the Delta log
   when the table publishes, unless the opener publishes it itself later (``defer_publish``);
2. the coordinator learns where the table lives (``Coordinator.register_table``: the Kafka
   coordinator registers it with the cleaner).

The user-facing ``lakewarden.Table`` is a ``TableHandle`` with the write, read, clean and
table-service methods; the error table (``lakewarden.errortable``) commits through a handle,
since it sits below ``Table`` (the table's own writes divert bad records into it).
"""

from __future__ import annotations

import os
import socket

import pyarrow as pa

from lakewarden.publish import attach
from lakewarden.settings import Settings
from lakewarden.storage import Storage
from lakewarden.table.config import TableConfig
from lakewarden.table.coordinator import Coordinator
from lakewarden.table.snapshot import shared_cache
from lakewarden.table.timeline import Timeline, TimelineState


class TableHandle:
    """An opened table: storage, config, timeline, coordinator, actor and settings."""

    def __init__(
        self,
        storage: Storage,
        config: TableConfig,
        *,
        coordinator: Coordinator,
        actor: str | None = None,
        settings: Settings | None = None,
        defer_publish: bool = False,
    ) -> None:
        """``defer_publish``: the Delta versions of this handle's commits are left to the
        caller (``lakewarden.publish.publisher_on_commit``), which publishes them when it
        chooses: job-committer answers the writer first."""
        self.storage = storage
        self.config = config
        self.coordinator = coordinator
        # What this process was configured with (the committer's options, the error table).
        self.settings = settings if settings is not None else Settings()
        self.actor = actor or f"python-writer@{socket.gethostname()}:{os.getpid()}"
        self.timeline_log = Timeline(storage, table=config.name)
        # The latest snapshots its writes and read manifests build on, kept between them and
        # shared with the other handles of this table in this process.
        self.snapshots = shared_cache(storage.uri, config.table_id)
        attach(storage, config, self.timeline_log, self.snapshots, publish=not defer_publish)  # 1.
        coordinator.register_table(config.table_id, storage.uri)  # 2.

    @property
    def uri(self) -> str:
        return self.storage.uri

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def table_id(self) -> str:
        return self.config.table_id

    @property
    def schema(self) -> pa.Schema:
        """The table's columns (without the ``_lw_*`` meta columns)."""
        return self.config.pa_schema

    def state(self) -> TimelineState:
        """The timeline folded to its tail (reloads only new entries)."""
        return self.timeline_log.load()


__all__ = ["TableHandle"]
