"""A small write's fixed cost: the writer and its job commit run on the process's shared
threads, started once, not on pools started and stopped by every write."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest

import lakewarden
from lakewarden.api.table import Table

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("ts", pa.int64())])


def _rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    regions = [("eu", "us")[i % 2] for i in ids]
    return pa.table({"id": ids, "region": regions, "ts": ids}, schema=SCHEMA)


def test_writes_start_no_pool_of_their_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = str(tmp_path / "t")
    table = Table.create(
        uri,
        name="t",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        ordering_field="ts",
        buckets=4,
    )
    table.write(_rows(0, 100), "insert")  # starts the shared threads it needs
    table.write(_rows(100, 100), "insert")
    started: list[str] = []
    original = threading.Thread.start

    def counted(self: threading.Thread) -> None:
        started.append(self.name)
        original(self)

    monkeypatch.setattr(threading.Thread, "start", counted)
    for start in range(200, 500, 100):
        table.write(_rows(start, 100), "insert")
    # The shared pool may still grow to its size; nothing else starts a thread.
    assert all(name.startswith("lw-write") for name in started), started
    assert len(started) <= 8
    assert lakewarden.read(uri).num_rows == 500
