"""The log-file cache of merge-on-read reads: later reads reuse scans, and never serve stale
ones (a new deltacommit, a file changed in place, eviction, stores without direct access)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _memstore import MemStorage

from lakewarden.api.table import Table
from lakewarden.logfile import MissingCommittedBlockError
from lakewarden.table.config import TableConfig, save_new_config
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.log_cache import LogCache

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("ts", pa.int64())])
ARGS: dict[str, Any] = {
    "name": "t",
    "record_key": "id",
    "schema": SCHEMA,
    "partition_by": ["region"],
    "ordering_field": "ts",
    "buckets": 1,
    "table_type": "merge_on_read",
}


def rows(*records: tuple[int, str, int]) -> pa.Table:
    return pa.Table.from_pylist(
        [dict(zip(SCHEMA.names, r, strict=True)) for r in records], schema=SCHEMA
    )


def as_set(table: pa.Table) -> set[tuple[Any, ...]]:
    return {tuple(r.values()) for r in table.select(SCHEMA.names).to_pylist()}


def log_paths(table: Table) -> list[str]:
    return [s.path for sl in table.snapshot().slices.values() for s in sl.log_files]


@pytest.fixture
def table(tmp_path: Path) -> Table:
    table = Table.create(str(tmp_path / "t"), **ARGS)
    table.write(rows((1, "eu", 1), (2, "eu", 1), (3, "us", 1)), "upsert")
    table.write(rows((1, "eu", 2), (3, "us", 2)), "upsert")
    return table


def test_a_second_read_reuses_the_scans_and_a_new_deltacommit_is_seen(table: Table) -> None:
    cache = table.log_cache
    first = table.read()
    assert (cache.hits, cache.misses) == (0, 2) and len(cache) == 2
    assert table.read().equals(first)
    assert (cache.hits, cache.misses) == (2, 2)
    # The new deltacommit's log files are new names: scanned, and its records are read.
    table.write(rows((2, "eu", 5)), "upsert")
    table.write(rows((3, "us", 9)), "delete")
    assert as_set(table.read()) == {(1, "eu", 2), (2, "eu", 5)}
    assert (cache.hits, cache.misses) == (4, 4)
    # Time travel takes what its snapshot's statistics say, from the same scans.
    assert as_set(table.read(as_of=table.timeline()[1].instant)) == as_set(first)


def test_a_log_file_changed_in_place_is_scanned_again(table: Table) -> None:
    table.read()
    path = next(p for p in log_paths(table) if "region=eu" in p)
    data = table.storage.read(path)
    table.storage.write(path, data[:-1])  # a committed block damaged: must not be served
    with pytest.raises(MissingCommittedBlockError):
        table.read()
    table.storage.write(path, data)
    assert as_set(table.read()) == {(1, "eu", 2), (2, "eu", 1), (3, "us", 2)}


def test_the_cache_keeps_at_most_max_bytes(table: Table) -> None:
    sizes = [table.storage.stat(p).size for p in log_paths(table)]
    table.log_cache = LogCache(max_bytes=max(sizes))  # room for one of the two files
    expected = {(1, "eu", 2), (2, "eu", 1), (3, "us", 2)}
    for _ in range(3):
        assert as_set(table.read()) == expected
    assert len(table.log_cache) == 1 and table.log_cache.misses >= 4
    table.log_cache = LogCache(max_bytes=min(sizes) - 1)  # no file fits: nothing is kept
    assert as_set(table.read()) == expected and len(table.log_cache) == 0


def test_stores_without_direct_file_access_scan_every_time() -> None:
    storage = MemStorage()
    config = TableConfig.new(**(ARGS | {"table_type": "mor"}))
    save_new_config(storage, config)
    table = Table(storage, config, coordinator=EmbeddedCoordinator())
    table.write(rows((1, "eu", 1)), "upsert")
    table.write(rows((1, "eu", 2)), "upsert")
    for _ in range(2):
        assert as_set(table.read()) == {(1, "eu", 2)}
    assert len(table.log_cache) == 0 and table.log_cache.hits == 0
