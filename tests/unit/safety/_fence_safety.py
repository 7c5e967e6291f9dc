"""Helpers of the Hudi regression tests on the completion protocol and liveness: a table on
local storage, "processes" (each its own embedded coordinator: no shared lock, no shared
heartbeats, as separate processes without Kafka) and a storage that runs a step of another
actor just before one chosen timeline entry is written (a deterministic interleaving)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from lakewarden.api.table import Table
from lakewarden.storage import Storage
from lakewarden.storage._forwarding import ForwardingStorage
from lakewarden.table.coordinator import Coordinator, EmbeddedCoordinator
from lakewarden.testing import SimulatedCrash

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("region", pa.string()),
        pa.field("ts", pa.int64()),
        pa.field("v", pa.string()),
    ]
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
        **config,
    }
    return Table.create(str(root / "orders"), coordinator=EmbeddedCoordinator(), **options)


def process(
    table: Table, actor: str, storage: Storage | None = None, coordinator: Coordinator | None = None
) -> Table:
    """``table`` as another process opens it: its own coordinator (unless given)."""
    return Table(
        storage or table.storage,
        table.config,
        coordinator=coordinator or EmbeddedCoordinator(),
        actor=actor,
    )


def entry_is(transition: str, action: str | None = None) -> Callable[[str, bytes], bool]:
    """Matches the write of a timeline entry of ``transition`` (and ``action``)."""

    def match(key: str, data: bytes) -> bool:
        if not key.startswith(".lakewarden/timeline/") or "/_" in key:
            return False
        if f'"transition":"{transition}"'.encode() not in data:
            return False
        return action is None or f'"action":"{action}"'.encode() in data

    return match


def crash() -> None:
    """An ``action`` for ``Before``: the process dies there (kill -9: none of its cleanup
    runs), or stops for good, which no other actor can tell apart."""
    raise SimulatedCrash("stopped just before this write")


class Before(ForwardingStorage):
    """Runs ``action()`` once, just before the first ``write_if_absent`` that ``when(key,
    data)`` accepts reaches the wrapped storage (the write then proceeds, or meets what the
    action changed). ``FaultyStorage.before`` counts calls; this one picks the entry."""

    def __init__(
        self, inner: Storage, when: Callable[[str, bytes], bool], action: Callable[[], object]
    ) -> None:
        super().__init__(inner)
        self.when, self.action, self.fired = when, action, False

    def write_if_absent(self, key: str, data: bytes) -> None:
        if not self.fired and self.when(key, data):
            self.fired = True
            self.action()
        super().write_if_absent(key, data)


class Paused:
    """A step of another actor run in a thread, paused just before the entry ``when`` picks
    (``paused`` is set), resumed by ``resume()``; ``result`` / ``error`` say how it ended."""

    def __init__(self, table: Table, when: Callable[[str, bytes], bool], actor: str) -> None:
        self.paused, self._go = threading.Event(), threading.Event()
        self.result: object = None
        self.error: BaseException | None = None
        self.table = process(table, actor, Before(table.storage, when, self._wait))
        self._thread: threading.Thread | None = None

    def _wait(self) -> None:
        self.paused.set()
        assert self._go.wait(30)

    def start(self, step: Callable[[Table], object]) -> Paused:
        def run() -> None:
            try:
                self.result = step(self.table)
            except BaseException as err:
                self.error = err

        self._thread = threading.Thread(target=run)
        self._thread.start()
        assert self.paused.wait(30), f"never reached the pause: {self.error!r}"
        return self

    def resume(self) -> None:
        self._go.set()
        assert self._thread is not None
        self._thread.join(30)
        assert not self._thread.is_alive()


def pending_ingestion(table: Table) -> str:
    """The one pending commit or deltacommit instant."""
    found = [
        i.instant for i in table.state().pending() if i.action.value in ("commit", "deltacommit")
    ]
    assert len(found) == 1, found
    return found[0]


def by_id(table: Table) -> dict[int, str]:
    return {r["id"]: r["v"] for r in table.read().to_pylist()}
