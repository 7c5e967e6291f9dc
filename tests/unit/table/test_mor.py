"""Merge-on-read tables: deltacommits append log blocks, reads merge them, time travel and
incremental reads work, and any sequence of writes reads the same as on copy-on-write."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from _hypothesis_profiles import examples
from _memstore import MemStorage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakewarden.api.table import Table
from lakewarden.logfile import MissingCommittedBlockError, scan_log
from lakewarden.settings import Settings
from lakewarden.storage import NotFoundError
from lakewarden.table import mor as mor_module
from lakewarden.table.bucket import append_group, route
from lakewarden.table.clean import MissingDataFileError
from lakewarden.table.config import TableConfig, save_new_config
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.files import LogFileName, WriteToken, is_log_file, split_key
from lakewarden.table.instant import Action
from lakewarden.table.merge import stamped
from lakewarden.table.mor import write_blocks
from lakewarden.table.stats import WorkloadProfile
from lakewarden.table.transaction import WriteTransaction

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("region", pa.string()),
        pa.field("ts", pa.int64()),
        pa.field("v", pa.string()),
    ]
)
MakeTable = Callable[..., Table]


def rows(*records: tuple[int, str | None, int | None, str]) -> pa.Table:
    return pa.Table.from_pylist(
        [dict(zip(SCHEMA.names, r, strict=True)) for r in records], schema=SCHEMA
    )


def as_set(table: pa.Table) -> set[tuple[Any, ...]]:
    return {tuple(r.values()) for r in table.select(SCHEMA.names).to_pylist()}


def as_sorted(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted((tuple(r.values()) for r in table.select(SCHEMA.names).to_pylist()), key=repr)


ARGS: dict[str, Any] = {
    "name": "orders",
    "record_key": "id",
    "schema": SCHEMA,
    "partition_by": ["region"],
    "ordering_field": "ts",
    "buckets": 2,
}


def memory_table(table_type: str, **overrides: Any) -> Table:
    storage = MemStorage()
    config = TableConfig.new(**(ARGS | {"table_type": table_type} | overrides))
    save_new_config(storage, config)
    return Table(storage, config, coordinator=EmbeddedCoordinator())


@pytest.fixture(params=["local", "memory", pytest.param("s3", marks=pytest.mark.s3)])
def make_table(request: pytest.FixtureRequest, tmp_path: Path) -> MakeTable:
    counter = iter(range(1000))

    def make(table_type: str = "merge_on_read", **overrides: Any) -> Table:
        args = ARGS | {"table_type": table_type} | overrides
        n = next(counter)
        if request.param == "memory":
            return memory_table(table_type, **overrides)
        if request.param == "local":
            return Table.create(str(tmp_path / f"t{n}"), **args)
        s3_settings: Settings = request.getfixturevalue("s3_settings")
        bucket: str = request.getfixturevalue("s3_bucket")
        return Table.create(f"s3://{bucket}/{tmp_path.name}/t{n}", settings=s3_settings, **args)

    return make


def log_stats(table: Table, instant: str) -> list[Any]:
    state = table.state().get(instant)
    assert state is not None and state.commit is not None
    return [s for s in state.commit.write_stats if s.is_log]


def test_upserts_and_deletes_are_deltacommits_that_append_log_blocks(make_table: MakeTable) -> None:
    table = make_table()
    assert table.config.table_type == "mor"
    first = table.write(rows((1, "eu", 1, "a"), (2, "eu", 1, "b"), (3, "us", 1, "c")), "upsert")
    assert log_stats(table, first.instant) == []  # new file groups: base files
    second = table.write(rows((1, "eu", 2, "a2"), (3, "us", 0, "stale")), "upsert")
    third = table.write(rows((2, "eu", 9, "")), "delete")
    assert {table.state().get(i).action for i in (first.instant, second.instant)} == {  # type: ignore[union-attr]
        Action.DELTACOMMIT
    }
    stats = log_stats(table, second.instant) + log_stats(table, third.instant)
    assert stats and all(is_log_file(split_key(s.path)[1]) for s in stats)
    assert all(s.log_block_count == 1 and s.log_attempt for s in stats)
    assert as_set(table.read()) == {(1, "eu", 2, "a2"), (3, "us", 1, "c")}
    # Time travel and incremental reads see the merged slices.
    assert as_set(table.read(as_of=second.instant)) == {
        (1, "eu", 2, "a2"),
        (2, "eu", 1, "b"),
        (3, "us", 1, "c"),
    }
    assert as_set(table.changes(first.instant)) == {(1, "eu", 2, "a2")}
    meta = table.read(with_meta=True)
    ids, files = meta.column("id").to_pylist(), meta.column("_lw_file_name").to_pylist()
    names = dict(zip(ids, files, strict=True))
    assert names[1].startswith(".") and names[3].endswith(".parquet")


def test_every_deltacommit_writes_log_files_named_by_its_instant(make_table: MakeTable) -> None:
    table = make_table(buckets=1)
    table.write(rows((1, "eu", 1, "a")), "upsert")
    instants = [table.write(rows((1, "eu", ts, f"v{ts}")), "upsert").instant for ts in (2, 3, 4)]
    (file_slice,) = table.snapshot().slices.values()
    names = [LogFileName.parse(split_key(s.path)[1]) for s in file_slice.log_files]
    # One new version per write, on every store: no file holds two instants' blocks.
    assert [(n.version, n.instant) for n in names] == [
        (1, instants[0]),
        (2, instants[1]),
        (3, instants[2]),
    ]
    assert as_set(table.read()) == {(1, "eu", 4, "v4")}


def test_the_cleaner_rolls_back_a_failed_deltacommit_and_deletes_exactly_its_log_files(
    make_table: MakeTable,
) -> None:
    table = make_table(buckets=1)
    table.write(rows((1, "eu", 1, "a"), (2, "eu", 1, "b")), "upsert")
    table.write(rows((1, "eu", 2, "a2")), "upsert")
    (committed,) = [s.path for sl in table.snapshot().slices.values() for s in sl.log_files]
    # A deltacommit whose tasks wrote log blocks (two attempts) and whose driver died.
    txn = WriteTransaction.begin(
        table.timeline_log,
        table.coordinator,
        table.table_id,
        operation="upsert",
        actor="w",
        action=Action.DELTACOMMIT,
    )
    (file_slice,) = table.snapshot().slices.values()
    records = stamped(
        route(rows((2, "eu", 9, "lost")), table.config).popitem()[1],
        txn.instant,
        table.config,
        "upsert",
    )
    with txn.heartbeat():
        txn.inflight(WorkloadProfile(operation="upsert"))
        failed = [
            write_blocks(
                table.storage,
                file_slice,
                records,
                instant=txn.instant,
                attempt=f"a{n}",
                token=WriteToken(0, 1, n),
                delete=False,
            ).path
            for n in (0, 1)
        ]
    assert all(LogFileName.parse(split_key(p)[1]).instant == txn.instant for p in failed)
    result = table.clean()
    assert result.rolled_back == (txn.instant,)
    assert sorted(f.path for f in result.files) == sorted(failed)
    assert not any(table.storage.exists(p) for p in failed)
    assert table.storage.exists(committed)  # the committed instant's blocks stay
    assert as_set(table.read()) == {(1, "eu", 2, "a2"), (2, "eu", 1, "b")}


def test_blocks_of_an_uncommitted_attempt_in_the_log_file_are_invisible(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), **(ARGS | {"table_type": "mor", "buckets": 1}))
    table.write(rows((1, "eu", 1, "a"), (2, "eu", 1, "b")), "upsert")
    table.write(rows((1, "eu", 2, "a2")), "upsert")
    (path,) = {s.path for sl in table.snapshot().slices.values() for s in sl.log_files}
    data = table.storage.read(path)
    # A zombie re-appends the committed bytes and a torn copy: nothing changes.
    table.storage.append(path, data + data[: len(data) // 2])
    assert as_set(table.read()) == {(1, "eu", 2, "a2"), (2, "eu", 1, "b")}
    assert len(scan_log(table.storage.read(path), path).corrupt) == 1
    # A committed block that is gone is a named error, never a silent drop.
    table.storage.write(path, data[:-1])
    with pytest.raises(MissingCommittedBlockError):
        table.read()


def test_a_merge_on_read_insert_writes_an_append_group_the_next_upsert_folds(
    make_table: MakeTable,
) -> None:
    table = make_table(buckets=1)
    table.write(rows((1, "eu", 1, "a")), "upsert")
    table.write(rows((1, "eu", 2, "b")), "upsert")
    inserted = table.write(rows((2, "eu", 1, "c")), "insert")
    canonical, appended = sorted(
        table.snapshot().slices.values(), key=lambda s: s.file_group.file_id
    )
    assert canonical.log_files != ()  # the slice with logs is left as it is
    assert appended.file_group == append_group(canonical.file_group, inserted.instant, 0)
    assert appended.log_files == () and appended.base_file is not None
    assert as_set(table.read()) == {(1, "eu", 2, "b"), (2, "eu", 1, "c")}
    table.write(rows((3, "eu", 1, "d")), "upsert")  # merged: one base file again
    (file_slice,) = table.snapshot().slices.values()
    assert file_slice.log_files == () and file_slice.base_file is not None
    assert as_set(table.read()) == {(1, "eu", 2, "b"), (2, "eu", 1, "c"), (3, "eu", 1, "d")}


def test_filters_apply_after_the_merge_and_partition_filters_skip_slices(
    make_table: MakeTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    cow, mor = make_table("cow"), make_table()
    for table in (cow, mor):
        table.write(rows((1, "eu", 1, "x"), (2, "eu", 1, "y"), (3, "us", 1, "x")), "upsert")
        # 1 stops matching v == "x", 2 starts matching, 3 (another partition) too.
        table.write(rows((1, "eu", 2, "y"), (2, "eu", 2, "x"), (3, "us", 2, "x")), "upsert")
    matching = pc.field("v") == "x"
    assert as_set(mor.read(filter=matching)) == {(2, "eu", 2, "x"), (3, "us", 2, "x")}
    in_eu = matching & (pc.field("region") == "eu")
    projected = mor.read(columns=["id"], filter=in_eu)
    assert projected.column_names == ["id"] and projected.column("id").to_pylist() == [2]
    assert projected == cow.read(columns=["id"], filter=in_eu)
    # The us slices are never read for a filter on region == "eu".
    read: list[str] = []
    real = mor_module.read_slices

    def spy(storage: Any, config: Any, slices: Any, **kw: Any) -> list[pa.Table]:
        read.extend(s.file_group.partition_path for s in slices)
        return real(storage, config, slices, **kw)

    monkeypatch.setattr(mor_module, "read_slices", spy)
    assert as_set(mor.read(filter=pc.field("region") == "eu")) == {
        (1, "eu", 2, "y"),
        (2, "eu", 2, "x"),
    }
    assert read and set(read) == {"region=eu"}


@pytest.mark.parametrize("where", ["local", "memory"])  # memory-mapped, and Storage.read
def test_read_slices_gives_read_slice_of_every_slice_in_order(where: str, tmp_path: Path) -> None:
    # read_slices decodes the base files with one scan and merges slice by slice as the
    # scan goes: same records as read_slice, in the slices' order, a slice without a base
    # file in the middle included.
    args = ARGS | {"table_type": "mor"}
    table = Table.create(str(tmp_path / "t"), **args) if where == "local" else memory_table("mor")
    table.write(rows(*((i, ("eu", "us")[i % 2], 1, f"v{i}") for i in range(12))), "upsert")
    table.write(rows((1, "us", 2, "one"), (2, "eu", 0, "stale"), (4, "eu", 3, "four")), "upsert")
    table.write(rows((3, "us", 9, ""), (6, "eu", 9, "")), "delete")
    slices = list(table.snapshot().slices.values())
    assert len(slices) >= 2 and any(s.log_files for s in slices)
    slices.insert(2, dataclasses.replace(slices[1], base_file=None))
    expected = [mor_module.read_slice(table.storage, table.config, s) for s in slices]
    got = mor_module.read_slices(table.storage, table.config, slices)
    assert [as_sorted(t) for t in got] == [as_sorted(t) for t in expected]
    assert [t.schema for t in got] == [t.schema for t in expected]
    projected = mor_module.read_slices(table.storage, table.config, slices, columns=["v"])
    assert [t.column_names for t in projected] == [["v"]] * len(slices)
    assert mor_module.read_slices(table.storage, table.config, []) == []


def test_read_slices_reads_a_base_file_without_rows(tmp_path: Path) -> None:
    # A base file of no rows yields no batch from the scan: its slice still gets its logs.
    table = Table.create(str(tmp_path / "t"), **(ARGS | {"table_type": "mor", "buckets": 1}))
    table.write(rows((1, "eu", 1, "a"), (2, "us", 1, "b"), (3, "us", 1, "c")), "upsert")
    table.write(rows((1, "eu", 2, "a2"), (2, "us", 2, "b2")), "upsert")
    eu, us = sorted(table.snapshot().slices.values(), key=lambda s: s.file_group.partition_path)
    assert eu.base_file is not None
    empty_key = eu.base_file.path.replace(".parquet", "-empty.parquet")
    path = table.storage.local_path(empty_key)
    assert path is not None
    pq.write_table(table.config.file_schema.empty_table(), path)
    stat = eu.base_file.model_copy(
        update={"path": empty_key, "num_records": 0, "size_bytes": Path(path).stat().st_size}
    )
    slices = [dataclasses.replace(eu, base_file=stat), us]
    got = mor_module.read_slices(table.storage, table.config, slices)
    assert [as_set(t) for t in got] == [
        {(1, "eu", 2, "a2")},
        {(2, "us", 2, "b2"), (3, "us", 1, "c")},
    ]


def test_partition_columns_the_path_fixes_are_added_after_the_merge_not_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # region is fixed by "region=eu" / "region=us": the scan and the merge leave it out and
    # every merged record gets its slice's value. A slice of records without a region (a
    # null partition value fixes nothing) makes the read carry the column for every slice.
    table = Table.create(str(tmp_path / "t"), **(ARGS | {"table_type": "mor"}))
    table.write(rows(*((i, ("eu", "us")[i % 2], 1, f"v{i}") for i in range(8))), "upsert")
    table.write(rows((1, "us", 2, "one"), (2, "eu", 2, "two")), "upsert")
    scanned: list[list[str]] = []
    real = mor_module._scan_bases

    def spy(storage: Any, config: Any, slices: Any, schema: pa.Schema) -> Any:
        scanned.append(schema.names)
        return real(storage, config, slices, schema)

    monkeypatch.setattr(mor_module, "_scan_bases", spy)
    slices = list(table.snapshot().slices.values())
    got = mor_module.read_slices(table.storage, table.config, slices, columns=["id", "region"])
    assert "region" not in scanned[-1] and "id" in scanned[-1]
    for file_slice, records in zip(slices, got, strict=True):
        value = file_slice.file_group.partition_path.removeprefix("region=")
        assert records.column_names == ["id", "region"]
        assert set(records.column("region").to_pylist()) == {value}
    expected = {(i, ("eu", "us")[i % 2], 1, f"v{i}") for i in (0, *range(3, 8))}
    assert as_set(table.read()) == expected | {(1, "us", 2, "one"), (2, "eu", 2, "two")}
    table.write(rows((10, None, 1, "none"), (11, None, 1, "none")), "insert")
    table.write(rows((10, None, 2, "ten")), "upsert")
    with_null = list(table.snapshot().slices.values())
    got = mor_module.read_slices(table.storage, table.config, with_null, columns=["id", "region"])
    assert "region" in scanned[-1]
    by_id = {r["id"]: r["region"] for t in got for r in t.to_pylist()}
    assert by_id[10] is None and by_id[11] is None and by_id[1] == "us" and by_id[2] == "eu"


def test_an_error_preparing_a_slices_logs_is_raised_by_the_read_and_stops_its_worker(
    tmp_path: Path,
) -> None:
    # Log sides are prepared by a worker thread: its error reaches the reader, and the
    # worker does not outlive the read.
    table = Table.create(str(tmp_path / "t"), **(ARGS | {"table_type": "mor"}))
    table.write(rows(*((i, ("eu", "us")[i % 2], 1, f"v{i}") for i in range(8))), "upsert")
    table.write(rows(*((i, ("eu", "us")[i % 2], 2, f"w{i}") for i in range(8))), "upsert")
    paths = sorted({s.path for sl in table.snapshot().slices.values() for s in sl.log_files})
    assert len(paths) >= 2
    table.storage.delete(paths[-1])
    with pytest.raises(MissingDataFileError):
        table.read()
    assert not [t for t in threading.enumerate() if t.name.startswith("lakewarden-logs")]


def test_a_memory_mapped_log_file_that_is_gone_is_a_named_error(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), **(ARGS | {"table_type": "mor", "buckets": 1}))
    table.write(rows((1, "eu", 1, "a")), "upsert")
    table.write(rows((1, "eu", 2, "a2")), "upsert")
    (path,) = {s.path for sl in table.snapshot().slices.values() for s in sl.log_files}
    table.storage.delete(path)
    with pytest.raises(MissingDataFileError) as err:
        table.read()
    assert err.value.path == path and isinstance(err.value.__cause__, NotFoundError)


# -- the property: merge-on-read reads as copy-on-write -------------------------------------

_RECORD = st.tuples(  # a null region: a partition whose path fixes no value
    st.integers(0, 7),
    st.sampled_from(["eu", "us", None]),
    st.integers(0, 3),
    st.sampled_from("xyz"),
)
_BATCH = st.tuples(
    st.sampled_from(["insert", "upsert", "upsert", "delete"]),
    st.lists(_RECORD, min_size=1, max_size=5),
)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_BATCH, min_size=1, max_size=6), st.data())
def test_property_merge_on_read_reads_the_same_as_copy_on_write(
    batches: list[tuple[str, list[tuple[int, str, int, str]]]], data: st.DataObject
) -> None:
    cow, mor = memory_table("cow"), memory_table("merge_on_read")
    instants: list[tuple[str, str]] = []
    for operation, records in batches:
        batch = rows(*records)
        instants.append((cow.write(batch, operation).instant, mor.write(batch, operation).instant))
        assert as_sorted(mor.read()) == as_sorted(cow.read())
    at = data.draw(st.integers(0, len(instants) - 1))
    (cow_at, mor_at) = instants[at]
    assert as_sorted(mor.read(as_of=mor_at)) == as_sorted(cow.read(as_of=cow_at))
    assert as_sorted(mor.changes(mor_at)) == as_sorted(cow.changes(cow_at))
