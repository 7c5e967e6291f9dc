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
from lakewarden.table.bucket import BucketSlices
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


def test_a_handle_opened_per_commit_applies_only_what_is_new(tmp_path: Path) -> None:
    # The Spark driver and job-committer open a handle per commit: they share the process's
    # cache of the table instead of replaying its history with a fresh one.
    storage = LocalStorage(str(tmp_path))
    first = _table(storage)
    for i in range(HISTORY):
        Table(storage, first.config, coordinator=EmbeddedCoordinator()).write(_batch(i), "upsert")
    with mock.patch.object(snapshot, "_apply", wraps=snapshot._apply) as applied:
        opened = Table(storage, first.config, coordinator=EmbeddedCoordinator())
        opened.write(_batch(HISTORY), "upsert")
    assert applied.call_count <= 2, f"{applied.call_count} instants applied"
    assert opened.snapshot().num_records == first.snapshot().num_records == 2 * (HISTORY + 1)


def test_the_shared_caches_are_per_table_and_location_and_bounded() -> None:
    table_id = "5a1f6c3e-8f51-4f7e-9d7e-2b1c0e3d4f5a"
    cache = snapshot.shared_cache("file:///a", table_id)
    assert snapshot.shared_cache("file:///a", table_id) is cache
    # A copy of a table's directory elsewhere keeps its id but has a history of its own.
    assert snapshot.shared_cache("file:///copy", table_id) is not cache
    for i in range(snapshot.SHARED_CACHES):
        snapshot.shared_cache(f"file:///other-{i}", table_id)
    assert snapshot.shared_cache("file:///a", table_id) is not cache  # the oldest went


def test_a_spark_task_builds_on_the_processs_cache_of_the_table(tmp_path: Path) -> None:
    # Spark reuses a Python worker for the tasks and micro-batches after one: each task's
    # merge base applies only what completed since the worker's last.
    from lakewarden.spark._task import base_snapshot

    storage = LocalStorage(str(tmp_path))
    table = _table(storage)
    results = [table.write(_batch(i), "upsert") for i in range(HISTORY)]
    with mock.patch.object(snapshot, "_apply", wraps=snapshot._apply) as applied:
        base = base_snapshot(LocalStorage(str(tmp_path)), table.config, results[-1].instant)
    assert applied.call_count <= 1, f"{applied.call_count} instants applied"
    assert base.as_of == results[-2].instant


@pytest.mark.parametrize("table_type", ["cow", "mor"])
def test_an_insert_looks_up_no_bucket_of_the_snapshot(tmp_path: Path, table_type: str) -> None:
    # Its rows go to new append groups: indexing every file of the snapshot by bucket would
    # be work that grows with the table for nothing.
    storage = LocalStorage(str(tmp_path))
    config = TableConfig.new(
        name="t", record_key="id", schema=SCHEMA, buckets=2, table_type=table_type
    )
    save_new_config(storage, config)
    table = Table(storage, config, coordinator=EmbeddedCoordinator())
    table.write(_batch(0), "insert")
    with mock.patch.object(BucketSlices, "of", side_effect=AssertionError("a bucket looked up")):
        table.write(_batch(1), "insert")
    assert table.snapshot().num_records == 4
