"""``Table.write(data, "insert")`` writes only its rows, one new append group per bucket: no
base file of the table is read, concurrent inserts into one bucket both commit, an upsert
racing an insert loses nothing, and the next upsert folds the append groups."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _memstore import MemStorage

from lakewarden.api.table import Table
from lakewarden.storage._forwarding import ForwardingStorage, Operation
from lakewarden.storage.local import LocalStorage
from lakewarden.table.bucket import append_group, bucket_prefix
from lakewarden.table.config import TableConfig, save_new_config
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.files import bucket_file_id
from lakewarden.table.instant import Action, Transition
from lakewarden.table.stats import FileGroupId

T = TypeVar("T")

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("region", pa.string()),
        pa.field("ts", pa.int64()),
        pa.field("v", pa.string()),
    ]
)


def rows(ids: range, v: str, ts: int = 1) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": i, "region": ("eu", "us")[i % 2], "ts": ts, "v": v} for i in ids], schema=SCHEMA
    )


def as_set(table: pa.Table) -> set[tuple[Any, ...]]:
    return {tuple(r.values()) for r in table.select(SCHEMA.names).to_pylist()}


class Counting(ForwardingStorage):
    """Records every operation and its key, and every local path handed out (a reader opens a
    local data file by its path, not through ``read``)."""

    def __init__(self, inner: LocalStorage) -> None:
        super().__init__(inner)
        self.calls: list[tuple[str, str]] = []

    def _invoke(self, op: Operation, key: str, call: Callable[[], T]) -> T:
        self.calls.append((op, key))
        return call()

    def local_path(self, key: str) -> str | None:
        self.calls.append(("local_path", key))
        return self.inner.local_path(key)

    def data_reads(self) -> list[tuple[str, str]]:
        """Reads of, or local paths to, committed data files (not the write's own staging)."""
        reads = ("read", "read_range", "local_path")
        return [
            (op, k)
            for op, k in self.calls
            if op in reads and k.endswith(".parquet") and not k.startswith("_temporary/")
        ]


def files_of(table: Table, root: Path) -> pa.Table:
    """Every base file of the current snapshot read by plain pyarrow (an independent reader)."""
    paths = [root / f.path for f in table.snapshot().base_files()]
    return pa.concat_tables([pq.read_table(p, partitioning=None) for p in paths])


def test_an_insert_reads_no_base_file_and_writes_only_its_rows(tmp_path: Path) -> None:
    root = tmp_path / "t"
    config = TableConfig.new(
        name="t", record_key="id", schema=SCHEMA, partition_by=["region"], buckets=2
    )
    storage = Counting(LocalStorage(root))
    save_new_config(storage, config)
    table = Table(storage, config, coordinator=EmbeddedCoordinator())
    table.write(rows(range(100), "old"), "upsert")  # canonical groups in every bucket
    table.write(rows(range(100, 140), "old"), "insert")  # and append groups beside them
    before = as_set(table.read())
    storage.calls.clear()

    result = table.write(rows(range(1000, 1010), "new"), "insert")

    assert storage.data_reads() == []
    written = result.stats.write_stats
    assert sum(w.num_records for w in written) == 10
    assert {w.file_group.file_id[9:] for w in written} == {f"{result.instant}-00000"}
    assert all(bucket_prefix(w.file_group.file_id) for w in written)
    new_rows = pa.concat_tables([pq.read_table(root / w.path, partitioning=None) for w in written])
    assert as_set(new_rows) == as_set(rows(range(1000, 1010), "new"))
    assert result.stats.replaced_file_groups == ()
    expected = before | as_set(rows(range(1000, 1010), "new"))
    assert as_set(table.read()) == expected
    assert as_set(files_of(table, root)) == expected


class Interleaving(MemStorage):
    """Runs ``hook`` (once) just before the first data file is written: a racing writer."""

    def __init__(self) -> None:
        super().__init__()
        self.hook: Callable[[], object] | None = None

    def write_if_absent(self, key: str, data: bytes) -> None:
        if key.endswith(".parquet") and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        super().write_if_absent(key, data)


def rivals(**config: Any) -> tuple[Interleaving, Table, Table]:
    """Two writers of one table (one bucket) taking turns on one lock."""
    storage = Interleaving()
    cfg = TableConfig.new(name="t", record_key="id", schema=SCHEMA, buckets=1, **config)
    save_new_config(storage, cfg)
    coordinator = EmbeddedCoordinator()
    first = Table(storage, cfg, coordinator=coordinator, actor="first")
    second = Table(storage, cfg, coordinator=coordinator, actor="second")
    return storage, first, second


def all_completed(table: Table) -> None:
    """A fresh fold of the timeline (the state machine) accepts every completion."""
    fresh = Table(table.storage, table.config, coordinator=EmbeddedCoordinator())
    assert {s.state for s in fresh.timeline()} == {Transition.COMPLETED}


def test_two_concurrent_inserts_into_one_bucket_both_commit() -> None:
    storage, first, second = rivals()
    first.write(rows(range(3), "base"), "upsert")
    storage.hook = lambda: second.write(rows(range(10, 12), "second"), "insert")
    first.write(rows(range(20, 22), "first"), "insert")
    assert storage.hook is None  # the race ran
    expected = as_set(rows(range(3), "base")) | as_set(rows(range(10, 12), "second"))
    assert as_set(first.read()) == expected | as_set(rows(range(20, 22), "first"))
    all_completed(first)


@pytest.mark.parametrize("table_type", ["cow", "mor"])
def test_an_insert_completing_inside_an_upsert_survives_it(table_type: str) -> None:
    storage, upserter, inserter = rivals(table_type=table_type)
    upserter.write(rows(range(3), "base"), "upsert")
    upserter.write(rows(range(3, 5), "appended"), "insert")
    storage.hook = lambda: inserter.write(rows(range(10, 12), "raced"), "insert")
    upsert = upserter.write(rows(range(2), "upserted", ts=2), "upsert")
    assert storage.hook is None
    canonical = FileGroupId(partition_path="", file_id=bucket_file_id(0))
    (replaced,) = upsert.stats.replaced_file_groups  # the append group its snapshot had
    assert replaced.file_id.startswith(bucket_prefix(canonical.file_id) or "?")
    assert as_set(upserter.read()) == (
        as_set(rows(range(2), "upserted", ts=2))
        | as_set(rows(range(2, 3), "base"))
        | as_set(rows(range(3, 5), "appended"))
        | as_set(rows(range(10, 12), "raced"))
    )
    all_completed(upserter)


@pytest.mark.parametrize("table_type", ["cow", "mor"])
def test_an_upsert_completing_inside_an_insert_keeps_the_insert(table_type: str) -> None:
    storage, inserter, upserter = rivals(table_type=table_type)
    inserter.write(rows(range(3), "base"), "upsert")
    inserter.write(rows(range(3, 5), "appended"), "insert")
    storage.hook = lambda: upserter.write(rows(range(4), "upserted", ts=2), "upsert")
    inserter.write(rows(range(10, 12), "raced"), "insert")
    assert storage.hook is None
    assert as_set(inserter.read()) == (
        as_set(rows(range(4), "upserted", ts=2))
        | as_set(rows(range(4, 5), "appended"))
        | as_set(rows(range(10, 12), "raced"))
    )
    all_completed(inserter)


@pytest.mark.parametrize("table_type", ["cow", "mor"])
def test_the_next_upsert_folds_the_append_groups_of_inserts(table_type: str) -> None:
    storage, table, _ = rivals(table_type=table_type)
    first = table.write(rows(range(3), "a"), "insert")
    second = table.write(rows(range(3, 6), "b"), "insert")
    canonical = FileGroupId(partition_path="", file_id=bucket_file_id(0))
    appended = {append_group(canonical, i.instant, 0) for i in (first, second)}
    assert set(table.snapshot().slices) == appended
    state = {s.instant: s for s in table.timeline()}
    want = Action.DELTACOMMIT if table_type == "mor" else Action.COMMIT
    assert state[first.instant].action == want

    upsert = table.write(rows(range(2), "A", ts=2), "upsert")

    assert set(upsert.stats.replaced_file_groups) == appended
    assert [w.file_group for w in upsert.stats.write_stats] == [canonical]
    assert set(table.snapshot().slices) == {canonical}
    assert as_set(table.read()) == (
        as_set(rows(range(2), "A", ts=2))
        | as_set(rows(range(2, 3), "a"))
        | as_set(rows(range(3, 6), "b"))
    )
