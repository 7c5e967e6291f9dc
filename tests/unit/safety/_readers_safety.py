"""Helpers of the Hudi regression tests on cleaning, reading and writing: a table on local
storage, "processes" (each its own embedded coordinator: no shared lock, no shared heartbeats,
as separate processes without Kafka), and a storage that runs another actor's step just before
a chosen call (a deterministic interleaving)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from lakewarden.api.table import Table
from lakewarden.storage import Storage
from lakewarden.storage._forwarding import ForwardingStorage, Operation
from lakewarden.table.clean import CleaningPolicy, CleanPolicy
from lakewarden.table.coordinator import EmbeddedCoordinator

T = TypeVar("T")
DAY = 24 * 3600.0

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("region", pa.string()),
        pa.field("ts", pa.int64()),
        pa.field("v", pa.string()),
    ]
)

# Every policy at its most aggressive, with no retention window: what a clean may delete at
# most. The protections these tests show hold without the window's help.
AGGRESSIVE = (
    CleanPolicy(commits_retained=1, retention_window_s=0, orphan_min_age_s=0),
    CleanPolicy(
        policy=CleaningPolicy.KEEP_LATEST_FILE_VERSIONS,
        file_versions_retained=1,
        retention_window_s=0,
        orphan_min_age_s=0,
    ),
    CleanPolicy(
        policy=CleaningPolicy.KEEP_LATEST_BY_HOURS,
        hours_retained=0.001,
        retention_window_s=0,
        orphan_min_age_s=0,
    ),
)


def rows(version: str, ids: range = range(8), ts: int = 1) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": i, "region": "eu" if i % 2 else "us", "ts": ts, "v": version} for i in ids],
        schema=SCHEMA,
    )


def new_table(root: Path, **config: Any) -> Table:
    options: dict[str, Any] = {
        "name": "orders",
        "record_key": "id",
        "schema": SCHEMA,
        "partition_by": ["region"],
        "ordering_field": "ts",
        "buckets": 2,
        "coordinator": EmbeddedCoordinator(),
    }
    return Table.create(str(root), **(options | config))


def process(table: Table, actor: str, storage: Storage | None = None) -> Table:
    """The same table opened by another process: its own coordinator (no shared lock)."""
    return Table(
        storage or table.storage, table.config, coordinator=EmbeddedCoordinator(), actor=actor
    )


def far_future() -> float:
    """A wall clock a week ahead: every age-based rule of a clean has run out."""
    return time.time() + 7 * DAY


class Interleave(ForwardingStorage):
    """Runs ``action`` once, just before the first call of ``op`` whose key ``matches``."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self._armed: tuple[Operation, Callable[[str], bool], Callable[[], object]] | None = None

    def before(
        self, op: Operation, matches: Callable[[str], bool], action: Callable[[], object]
    ) -> None:
        self._armed = (op, matches, action)

    @property
    def fired(self) -> bool:
        return self._armed is None

    def _invoke(self, op: Operation, key: str, call: Callable[[], T]) -> T:
        armed = self._armed
        if armed is not None and armed[0] == op and armed[1](key):
            self._armed = None
            armed[2]()
        return call()


def data_files(table: Table) -> set[str]:
    return {
        o.key
        for o in table.storage.list("")
        if not o.key.startswith((".lakewarden/", "_temporary/"))
    }


def snapshot_files_exist(table: Table) -> None:
    """Every file the latest snapshot names is in storage."""
    for file_slice in table.snapshot().slices.values():
        for path in file_slice.paths:
            assert table.storage.exists(path), path
