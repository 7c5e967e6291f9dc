"""A write's cost does not grow with the table's history: an opened table keeps its latest
snapshot (``TableHandle.snapshots``), so a write and its read manifest apply only the instants
completed since the last, instead of replaying the timeline."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pyarrow as pa
import pytest
from _memstore import MemStorage

from lakewarden.api.table import Table
from lakewarden.storage.local import LocalStorage
from lakewarden.table import snapshot
from lakewarden.table.config import TableConfig, save_new_config
from lakewarden.table.coordinator import EmbeddedCoordinator

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
HISTORY = 12


def _table(storage: LocalStorage | MemStorage) -> Table:
    config = TableConfig.new(name="t", record_key="id", schema=SCHEMA, buckets=2)
    save_new_config(storage, config)
    return Table(storage, config, coordinator=EmbeddedCoordinator())


def _batch(i: int) -> pa.Table:
    return pa.table({"id": pa.array([2 * i, 2 * i + 1]), "v": pa.array([f"v{i}"] * 2)}, SCHEMA)


@pytest.mark.parametrize("operation", ["insert", "upsert"])
@pytest.mark.parametrize("local", [True, False], ids=["with read manifests", "without"])
def test_a_write_applies_only_the_instants_completed_since_the_last(
    tmp_path: Path, operation: str, local: bool
) -> None:
    table = _table(LocalStorage(str(tmp_path)) if local else MemStorage())
    for i in range(HISTORY):
        table.write(_batch(i), operation)
    with mock.patch.object(snapshot, "_apply", wraps=snapshot._apply) as applied:
        table.write(_batch(HISTORY), operation)
    # The write's snapshot applies the previous write's instant (or nothing, when the read
    # manifest after that write applied it); the manifest after this write applies its own.
    assert applied.call_count <= 2, f"{applied.call_count} instants applied"
    assert table.snapshot().num_records == 2 * (HISTORY + 1)
