"""Table.write / read / changes round trips, merge rules, bad input, and conflicts.

Round trips run on three backends: a local directory, an in-memory store (which exercises the
reader's non-local path: no ``local_path``), and S3 on SeaweedFS (marked ``s3``).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from _hypothesis_profiles import examples
from _memstore import MemStorage
from hypothesis import given, settings
from hypothesis import strategies as st

import lakewarden
from lakewarden.api.table import Table
from lakewarden.settings import Settings
from lakewarden.storage import ObjectInfo, Storage, StorageIOError
from lakewarden.storage.faults import FaultyStorage
from lakewarden.table.bucket import append_group, bucket_of, route
from lakewarden.table.clean import MissingDataFileError
from lakewarden.table.config import (
    META_COLUMNS,
    META_FILE_NAME,
    NotATableError,
    TableAlreadyExistsError,
    TableConfig,
    UnsupportedFormatVersionError,
    save_new_config,
)
from lakewarden.table.conflicts import OverlappingCommitConflict
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.files import BaseFileName, WriteToken, bucket_file_id, file_key
from lakewarden.table.instant import Transition
from lakewarden.table.merge import merge, stamped, stored
from lakewarden.table.reader import ColumnNotFoundError, partition_expression
from lakewarden.table.snapshot import InstantNotCompletedError
from lakewarden.table.stats import CommitStats, FileGroupId, WorkloadProfile, WriteStat
from lakewarden.table.transaction import WriteTransaction
from lakewarden.table.write_input import InvalidRecordError, SchemaMismatchError, validate_input

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


@pytest.fixture(params=["local", "memory", pytest.param("s3", marks=pytest.mark.s3)])
def make_table(request: pytest.FixtureRequest, tmp_path: Path) -> MakeTable:
    """``make_table(**config)`` -> a new table on the parametrised backend."""
    counter = iter(range(1000))

    def make(**overrides: Any) -> Table:
        args: dict[str, Any] = {
            "name": "orders",
            "record_key": "id",
            "schema": SCHEMA,
            "partition_by": ["region"],
            "ordering_field": "ts",
            "buckets": 3,
        }
        args.update(overrides)
        n = next(counter)
        if request.param == "memory":
            storage = MemStorage()
            config = TableConfig.new(**args)
            save_new_config(storage, config)
            return Table(storage, config, coordinator=EmbeddedCoordinator())
        if request.param == "local":
            return Table.create(str(tmp_path / f"t{n}"), **args)
        s3_settings: Settings = request.getfixturevalue("s3_settings")
        bucket: str = request.getfixturevalue("s3_bucket")
        uri = f"s3://{bucket}/{tmp_path.name}/t{n}"
        return Table.create(uri, settings=s3_settings, **args)

    return make


@pytest.fixture
def local_table(tmp_path: Path) -> Table:
    return Table.create(
        str(tmp_path / "t"),
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        ordering_field="ts",
        buckets=3,
    )


def data_files(storage: Storage) -> list[ObjectInfo]:
    return [o for o in storage.list("") if not o.key.startswith(".lakewarden/")]


# -- round trips ----------------------------------------------------------------------------


def test_insert_upsert_delete_round_trip(make_table: MakeTable) -> None:
    table = make_table()
    first = table.write(rows((1, "eu", 1, "a"), (2, "eu", 1, "b"), (3, "us", 1, "c")), "insert")
    assert sum(s.num_inserts for s in first.stats.write_stats) == 3
    assert as_set(table.read()) == {(1, "eu", 1, "a"), (2, "eu", 1, "b"), (3, "us", 1, "c")}

    second = table.write(rows((1, "eu", 2, "A"), (2, "eu", 0, "B"), (4, "us", 1, "d")))
    assert second.stats.operation == "upsert"
    assert as_set(table.read()) == {
        (1, "eu", 2, "A"),  # larger ts wins
        (2, "eu", 1, "b"),  # smaller ts loses to the stored record
        (3, "us", 1, "c"),
        (4, "us", 1, "d"),
    }
    third = table.write(pa.table({"id": [3, 99], "region": ["us", "us"]}), "delete")
    assert third.stats.deleted_records == 1
    assert as_set(table.read()) == {(1, "eu", 2, "A"), (2, "eu", 1, "b"), (4, "us", 1, "d")}

    # time travel and the top-level reader agree
    assert as_set(table.read(as_of=first.instant)) == {
        (1, "eu", 1, "a"),
        (2, "eu", 1, "b"),
        (3, "us", 1, "c"),
    }
    states = [(s.instant, s.state) for s in table.timeline()]
    assert states == [(r.instant, Transition.COMPLETED) for r in (first, second, third)]


def test_changes_since_an_instant(make_table: MakeTable) -> None:
    table = make_table()
    first = table.write(rows((1, "eu", 1, "a"), (2, "eu", 1, "b"), (3, "us", 1, "c")))
    second = table.write(rows((1, "eu", 2, "A"), (4, "us", 1, "d")))
    third = table.write(rows((1, "eu", 3, "AA")))
    changed = table.changes(first.instant, with_meta=True)
    assert as_set(changed) == {(1, "eu", 3, "AA"), (4, "us", 1, "d")}
    assert set(changed.column("_lw_commit_time").to_pylist()) == {second.instant, third.instant}
    assert as_set(table.changes(second.instant)) == {(1, "eu", 3, "AA")}
    assert as_set(table.changes(second.instant, until=second.instant)) == set()
    assert as_set(table.changes(first.instant, until=second.instant)) == {
        (1, "eu", 2, "A"),
        (4, "us", 1, "d"),
    }
    assert table.changes(third.instant).num_rows == 0
    assert as_set(table.changes(None)) == as_set(table.read())
    with pytest.raises(InstantNotCompletedError, match="since_instant '20000101000000000'"):
        table.changes("20000101000000000")


def test_columns_filter_and_meta(make_table: MakeTable) -> None:
    table = make_table()
    table.write(rows((1, "eu", 1, "a"), (2, "us", 5, "b"), (3, None, 7, "c")))
    assert table.read().column_names == SCHEMA.names
    assert table.read(columns=["v", "id"]).column_names == ["v", "id"]
    with_meta = table.read(with_meta=True)
    assert with_meta.column_names == [*META_COLUMNS, *SCHEMA.names]
    ids, paths = with_meta["id"].to_pylist(), with_meta["_lw_partition_path"].to_pylist()
    paths = dict(zip(ids, paths, strict=True))
    assert paths == {1: "region=eu", 2: "region=us", 3: "region=__HIVE_DEFAULT_PARTITION__"}
    assert as_set(table.read(filter=pc.field("region") == "us")) == {(2, "us", 5, "b")}
    assert as_set(table.read(filter=pc.field("region").is_null())) == {(3, None, 7, "c")}
    assert as_set(table.read(filter=pc.field("ts") > 4)) == {(2, "us", 5, "b"), (3, None, 7, "c")}
    with pytest.raises(ColumnNotFoundError, match=r"has no columns \['nope'\]"):
        table.read(columns=["id", "nope"])


def test_partition_filter_skips_other_partitions_files(local_table: Table) -> None:
    local_table.write(rows((1, "eu", 1, "a"), (2, "us", 1, "b")))
    us = [s for s in local_table.snapshot().base_files() if s.path.startswith("region=us/")]
    assert len(us) == 1
    local_table.storage.delete(us[0].path)  # only a read that opens it can fail
    assert as_set(local_table.read(filter=pc.field("region") == "eu")) == {(1, "eu", 1, "a")}
    with pytest.raises(MissingDataFileError, match="region=us"):
        local_table.read()


def test_empty_input_commits_an_empty_instant(local_table: Table) -> None:
    result = local_table.write(SCHEMA.empty_table())
    assert result.stats.write_stats == ()
    assert [s.state for s in local_table.timeline()] == [Transition.COMPLETED]
    batch = rows((1, "eu", 1, "a")).to_batches()[0]
    local_table.write(batch)  # a RecordBatch is accepted too
    assert as_set(local_table.read()) == {(1, "eu", 1, "a")}


def test_empty_table_reads_empty_with_schema(make_table: MakeTable) -> None:
    table = make_table()
    empty = table.read()
    assert empty.num_rows == 0 and empty.schema.names == SCHEMA.names
    assert table.changes(None).num_rows == 0


def test_top_level_read(local_table: Table) -> None:
    result = local_table.write(rows((1, "eu", 1, "a")))
    assert lakewarden.read(local_table.uri).to_pylist() == [
        {"id": 1, "region": "eu", "ts": 1, "v": "a"}
    ]
    got = lakewarden.read(local_table.uri, as_of=result.instant, columns=["id"])
    assert got.to_pylist() == [{"id": 1}]
    assert lakewarden.Table is Table


def test_a_read_reads_the_settings_from_the_environment_once(
    local_table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Building Settings parses the environment and .env: a fixed cost of every read.
    import lakewarden.api.connection as connection
    import lakewarden.api.table as table_module

    built: list[Settings] = []

    def counting() -> Settings:
        built.append(Settings())
        return built[-1]

    monkeypatch.setattr(table_module, "Settings", counting)
    monkeypatch.setattr(connection, "Settings", counting)
    lakewarden.read(local_table.uri)
    assert len(built) == 1


# -- merge rules ----------------------------------------------------------------------------


def test_upsert_ties_and_duplicates_within_the_input(local_table: Table) -> None:
    local_table.write(rows((1, "eu", 5, "stored"), (2, "eu", 5, "stored")))
    local_table.write(
        rows(
            (1, "eu", 5, "tie-first"),
            (1, "eu", 5, "tie-last"),  # a tie goes to the incoming record, the later one
            (2, "eu", None, "null-ts"),  # null orders below everything
            (3, "eu", 1, "x"),
            (3, "eu", 9, "y"),
            (3, "eu", 4, "z"),
        )
    )
    assert as_set(local_table.read()) == {
        (1, "eu", 5, "tie-last"),
        (2, "eu", 5, "stored"),
        (3, "eu", 9, "y"),
    }


def test_upsert_without_ordering_field_takes_the_last_record(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), name="t", record_key="id", schema=SCHEMA)
    table.write(rows((1, "eu", 5, "a"), (2, "eu", 5, "b")))
    table.write(rows((1, "eu", 0, "x"), (1, "eu", 0, "y")))
    assert as_set(table.read()) == {(1, "eu", 0, "y"), (2, "eu", 5, "b")}


def test_insert_appends_without_deduplication(local_table: Table) -> None:
    local_table.write(rows((1, "eu", 1, "a")), "insert")
    local_table.write(rows((1, "eu", 2, "b"), (1, "eu", 3, "c")), "insert")
    assert sorted(local_table.read()["v"].to_pylist()) == ["a", "b", "c"]


def test_delete_that_empties_a_file_group_replaces_it(local_table: Table) -> None:
    local_table.write(rows((1, "eu", 1, "a"), (2, "us", 1, "b")))
    result = local_table.write(pa.table({"id": [1], "region": ["eu"]}), "delete")
    group = FileGroupId(partition_path="region=eu", file_id=bucket_file_id(bucket_of(1, 3)))
    assert result.stats.replaced_file_groups == (group,)
    assert result.stats.write_stats == ()
    assert as_set(local_table.read()) == {(2, "us", 1, "b")}
    assert len(local_table.snapshot().base_files()) == 1
    # the group can be written again
    local_table.write(rows((5, "eu", 1, "again")))
    assert as_set(local_table.read()) == {(2, "us", 1, "b"), (5, "eu", 1, "again")}


# -- append groups (what a Spark append leaves beside a bucket's canonical group) ------------


def append_like_spark(table: Table, *shares: pa.Table) -> str:
    """A plain-format Spark append through the table core's API, as ``lakewarden.spark._task``
    does it: task ``n`` writes its share of the rows into the append group of every bucket they
    fall in (``append_group``), one instant for all tasks. Returns the instant."""
    config = table.config
    txn = WriteTransaction.begin(
        table.timeline_log, table.coordinator, config.table_id, operation="insert", actor="spark"
    )
    written: list[WriteStat] = []
    for task, share in enumerate(shares):
        checked = validate_input(share, config, "insert")
        for canonical, part in route(checked, config).items():
            group = append_group(canonical, txn.instant, task)
            name = BaseFileName(group.file_id, WriteToken(task, 0, 0), txn.instant).render()
            key = file_key(group.partition_path, name)
            records = stamped(part, txn.instant, config, "insert")
            records = records.append_column(META_FILE_NAME, pa.repeat(pa.scalar(name), len(part)))
            buffer = io.BytesIO()
            pq.write_table(
                records.select(config.file_schema.names).cast(config.file_schema), buffer
            )
            table.storage.write_if_absent(key, buffer.getvalue())
            written.append(
                WriteStat(
                    file_group=group,
                    path=key,
                    base_instant=txn.instant,
                    num_records=len(part),
                    num_inserts=len(part),
                    size_bytes=len(buffer.getvalue()),
                )
            )
    groups = tuple(w.file_group for w in written)
    txn.inflight(WorkloadProfile(operation="insert", file_groups=groups))
    txn.complete(CommitStats(operation="insert", write_stats=tuple(written)))
    return txn.instant


def _eu_group(key: int, buckets: int) -> FileGroupId:
    return FileGroupId(partition_path="region=eu", file_id=bucket_file_id(bucket_of(key, buckets)))


def test_upsert_and_delete_merge_every_append_group_of_a_bucket(make_table: MakeTable) -> None:
    table = make_table(buckets=1)  # one bucket per partition: every "eu" key shares it
    table.write(rows((1, "eu", 1, "a"), (2, "eu", 1, "b")), "upsert")
    appended = append_like_spark(
        table,
        rows((3, "eu", 1, "c"), (1, "eu", 0, "a-again")),  # inserts may duplicate keys
        rows((4, "eu", 1, "d"), (2, "eu", 5, "b-again")),
    )
    canonical = _eu_group(1, 1)
    extras = (append_group(canonical, appended, 0), append_group(canonical, appended, 1))
    assert set(table.snapshot().slices) == {canonical, *extras}
    assert table.read().num_rows == 6

    upsert = table.write(rows((1, "eu", 2, "A"), (3, "eu", 2, "C"), (5, "eu", 1, "e")))

    assert as_set(table.read()) == {
        (1, "eu", 2, "A"),  # replaces the canonical record and the appended duplicate
        (2, "eu", 1, "b"),  # keys the upsert does not touch keep their duplicates
        (2, "eu", 5, "b-again"),
        (3, "eu", 2, "C"),  # the appended record, replaced
        (4, "eu", 1, "d"),
        (5, "eu", 1, "e"),
    }
    assert upsert.stats.replaced_file_groups == extras  # consolidated into the canonical group
    assert [w.file_group for w in upsert.stats.write_stats] == [canonical]
    assert (upsert.stats.write_stats[0].num_updates, upsert.stats.write_stats[0].num_inserts) == (
        2,
        1,
    )
    assert set(table.snapshot().slices) == {canonical}

    table.write(pa.table({"id": [2, 4], "region": ["eu", "eu"]}), "delete")
    assert as_set(table.read()) == {(1, "eu", 2, "A"), (3, "eu", 2, "C"), (5, "eu", 1, "e")}


def test_a_delete_of_appended_records_replaces_their_append_groups(local_table: Table) -> None:
    """No canonical group yet: the delete empties the bucket and names its canonical group
    among the replaced ones all the same (see ``replaced_by_merge``)."""
    appended = append_like_spark(local_table, rows((1, "eu", 1, "a")), rows((1, "eu", 2, "b")))
    kept = append_like_spark(local_table, rows((2, "us", 1, "other partition")))
    canonical = _eu_group(1, 3)

    result = local_table.write(pa.table({"id": [1], "region": ["eu"]}), "delete")

    extras = (append_group(canonical, appended, 0), append_group(canonical, appended, 1))
    assert result.stats.replaced_file_groups == (canonical, *extras)
    assert result.stats.write_stats == ()
    assert result.stats.deleted_records == 2
    assert as_set(local_table.read()) == {(2, "us", 1, "other partition")}
    us = FileGroupId(partition_path="region=us", file_id=bucket_file_id(bucket_of(2, 3)))
    assert set(local_table.snapshot().slices) == {append_group(us, kept, 0)}


def test_a_delete_that_finds_nothing_leaves_the_append_groups(local_table: Table) -> None:
    appended = append_like_spark(local_table, rows((1, "eu", 1, "a")))
    result = local_table.write(pa.table({"id": [1], "region": ["us"]}), "delete")
    assert result.stats.replaced_file_groups == () and result.stats.write_stats == ()
    assert set(local_table.snapshot().slices) == {append_group(_eu_group(1, 3), appended, 0)}


keyed_records = st.tuples(st.integers(0, 6), st.none() | st.integers(0, 3))


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(keyed_records, max_size=12), st.lists(keyed_records, min_size=1, max_size=12))
def test_upsert_merge_equals_the_model(
    stored_records: list[tuple[int, int | None]], incoming_records: list[tuple[int, int | None]]
) -> None:
    """The vectorised merge against a record-at-a-time model of the upsert rule."""
    config = TableConfig.new(name="m", record_key="id", schema=SCHEMA, ordering_field="ts")
    model: dict[int, tuple[int | None, str]] = {}
    for n, (key, ts) in enumerate(stored_records):  # a stored file has one record per key
        model.setdefault(key, (ts, f"s{n}"))
    stored_rows = rows(*((k, "eu", ts, v) for k, (ts, v) in model.items()))
    for n, (key, ts) in enumerate(incoming_records):
        old = model.get(key)
        if old is None or _rank(ts) >= _rank(old[0]):
            model[key] = (ts, f"i{n}")
    existing = None
    if stored_rows.num_rows:
        existing = stored(_as_file(stored_rows, config, "20240101000000000"), config)
    incoming = rows(*((k, "eu", ts, f"i{n}") for n, (k, ts) in enumerate(incoming_records)))
    incoming = stamped(_routed(incoming), "20240101000000001", config, "upsert")
    merged = merge("upsert", existing, incoming, "ts")
    assert merged.table is not None
    got = {r["id"]: (r["ts"], r["v"]) for r in merged.table.to_pylist()}
    assert len(got) == merged.table.num_rows  # one record per key
    assert got == model
    assert merged.inserts + merged.updates == len({k for k, _ in incoming_records})


def _rank(ts: int | None) -> int:
    return -1 if ts is None else ts


def _routed(table: pa.Table) -> pa.Table:
    """What ``bucket.route`` adds to the input (unpartitioned)."""
    keys = pc.cast(table["id"], pa.string())
    table = table.add_column(0, "_lw_partition_path", pa.repeat(pa.scalar(""), table.num_rows))
    return table.add_column(0, "_lw_record_key", keys)


def _as_file(table: pa.Table, config: TableConfig, instant: str) -> pa.Table:
    """``table`` as the writer stores it: meta columns in front."""
    with_meta = stamped(_routed(table), instant, config, "upsert")
    return with_meta.append_column("_lw_file_name", pa.repeat(pa.scalar("f"), table.num_rows))


# -- bad input: a clear error naming the record, nothing committed ---------------------------


def _assert_nothing_committed(table: Table, tail_before: int) -> None:
    state = table.state()
    assert state.tail_seq == tail_before
    assert data_files(table.storage) == [] or all(
        o.key in {s.path for s in table.snapshot().base_files()} for o in data_files(table.storage)
    )


def test_null_record_key_names_the_record(local_table: Table) -> None:
    local_table.write(rows((1, "eu", 1, "a")))
    tail = local_table.state().tail_seq
    bad = pa.table(
        {
            "id": [7, 8, None, None],
            "region": ["eu", "us", "us", "eu"],
            "ts": [1, 2, 3, 4],
            "v": ["ok", "ok", "bad", "bad"],
        },
    )
    with pytest.raises(InvalidRecordError, match="record 2 has a null record key") as info:
        local_table.write(bad)
    err = info.value
    assert err.record_index == 2
    assert err.record == {"id": None, "region": "us", "ts": 3, "v": "bad"}
    assert "'region': 'us'" in str(err) and "2 record(s)" in str(err)
    assert "nothing was written" in str(err)
    _assert_nothing_committed(local_table, tail)
    assert as_set(local_table.read()) == {(1, "eu", 1, "a")}


def test_null_in_a_required_field(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.string()), pa.field("n", pa.int64(), nullable=False)])
    table = Table.create(str(tmp_path / "t"), name="t", record_key="id", schema=schema)
    with pytest.raises(InvalidRecordError, match="record 1 has a null in required field 'n'"):
        table.write(pa.table({"id": ["a", "b"], "n": [1, None]}))
    assert table.timeline() == []
    assert data_files(table.storage) == []


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (pa.table({"id": [1], "region": ["eu"], "ts": [1]}), r"missing columns \['v'\]"),
        (
            pa.table({"id": [1], "region": ["eu"], "ts": [1], "v": ["a"], "x": [1]}),
            r"columns not in the table \['x'\]",
        ),
        (
            pa.table({"id": ["1"], "region": ["eu"], "ts": [1], "v": ["a"]}),
            r"wrong types \['id: string \(table: int64\)'\]",
        ),
    ],
)
def test_schema_mismatch_commits_nothing(local_table: Table, data: pa.Table, message: str) -> None:
    with pytest.raises(SchemaMismatchError, match=message) as info:
        local_table.write(data)
    assert "Help: cast or select the input" in str(info.value)
    assert local_table.timeline() == []
    assert data_files(local_table.storage) == []


def test_unknown_operation(local_table: Table) -> None:
    with pytest.raises(ValueError, match="operation must be one of insert, upsert, delete"):
        local_table.write(rows((1, "eu", 1, "a")), "merge")  # type: ignore[arg-type]
    assert local_table.timeline() == []


# -- table lifecycle errors -----------------------------------------------------------------


def test_create_twice_and_open_errors(tmp_path: Path, local_table: Table) -> None:
    with pytest.raises(TableAlreadyExistsError, match="a table already exists"):
        Table.create(local_table.uri, name="again", record_key="id", schema=SCHEMA)
    assert Table.open(local_table.uri).config == local_table.config
    with pytest.raises(NotATableError, match="is not a lakewarden table"):
        Table.open(str(tmp_path / "nothing-here"))
    config_path = tmp_path / "t" / ".lakewarden" / "table.json"
    raw = json.loads(config_path.read_text())
    raw["format_version"] = 99
    config_path.write_text(json.dumps(raw))
    with pytest.raises(UnsupportedFormatVersionError, match="format_version 99"):
        lakewarden.read(local_table.uri)


def test_as_of_a_pending_instant_is_an_error(local_table: Table) -> None:
    with pytest.raises(InstantNotCompletedError, match="as_of '20240101000000000'"):
        local_table.read(as_of="20240101000000000")


# -- conflicts ------------------------------------------------------------------------------


class _Interleaving(MemStorage):
    """Runs ``hook`` (once) just before the first data file is written (a racing writer, a
    failing store) and ``after`` (once) just after it (arming a lost reply)."""

    def __init__(self) -> None:
        super().__init__()
        self.hook: Callable[[], None] | None = None
        self.after: Callable[[], None] | None = None

    def write_if_absent(self, key: str, data: bytes) -> None:
        if key.endswith(".parquet") and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        super().write_if_absent(key, data)
        if key.endswith(".parquet") and self.after is not None:
            after, self.after = self.after, None
            after()


def _shared_table(buckets: int = 1) -> tuple[_Interleaving, TableConfig]:
    storage = _Interleaving()
    config = TableConfig.new(name="t", record_key="id", schema=SCHEMA, buckets=buckets)
    save_new_config(storage, config)
    return storage, config


def _rivals(storage: Storage, config: TableConfig) -> tuple[Table, Table]:
    """Two writers of one table in one process: they take turns on one lock."""
    coordinator = EmbeddedCoordinator()
    return (
        Table(storage, config, coordinator=coordinator, actor="loser"),
        Table(storage, config, coordinator=coordinator, actor="winner"),
    )


def test_the_loser_of_an_overlap_is_rolled_back_and_leaves_no_files() -> None:
    storage, config = _shared_table()
    loser, winner = _rivals(storage, config)
    storage.hook = lambda: winner.write(rows((1, "eu", 1, "winner")))
    with pytest.raises(OverlappingCommitConflict) as info:
        loser.write(rows((1, "eu", 1, "loser"), (2, "eu", 1, "loser")))
    assert "Help:" in str(info.value)
    states = {s.instant: s for s in loser.timeline()}
    (lost,) = [s for s in states.values() if s.state == Transition.ROLLED_BACK]
    assert info.value.instant == lost.instant
    assert (lost.failed_stage, lost.error_type) == ("complete_instant", type(info.value).__name__)
    assert lost.failed_job_id == f"{lost.instant}-direct"  # a store without private staging
    assert as_set(loser.read()) == {(1, "eu", 1, "winner")}
    assert [o.key for o in data_files(storage) if lost.instant in o.key] == []


def test_a_store_failure_while_writing_files_rolls_back() -> None:
    storage, config = _shared_table(buckets=2)
    table = Table(storage, config, coordinator=EmbeddedCoordinator())
    table.write(rows((1, "eu", 1, "old"), (2, "eu", 1, "old")))

    def fail() -> None:
        raise StorageIOError("disk on fire", key="x")

    storage.hook = fail
    with pytest.raises(StorageIOError, match="disk on fire"):
        table.write(rows((1, "eu", 2, "new"), (2, "eu", 2, "new")))
    last = table.timeline()[-1]
    assert last.state == Transition.ROLLED_BACK
    assert last.reason is not None and "disk on fire" in last.reason
    assert (last.failed_stage, last.error_type) == ("write_files", "StorageIOError")
    assert [o.key for o in data_files(storage) if last.instant in o.key] == []
    assert as_set(table.read()) == {(1, "eu", 1, "old"), (2, "eu", 1, "old")}


def test_a_lost_reply_on_completion_is_reconciled_from_the_log() -> None:
    storage, config = _shared_table()
    faulty = FaultyStorage(storage)
    table = Table(faulty, config, coordinator=EmbeddedCoordinator())

    def lose_the_completed_reply() -> None:
        faulty.lose_reply("write_if_absent")  # one group: the next create is the completed entry

    storage.after = lose_the_completed_reply
    result = table.write(rows((1, "eu", 1, "a")))
    assert faulty.pending() == 0  # the fault fired
    assert [(s.instant, s.state) for s in table.timeline()] == [
        (result.instant, Transition.COMPLETED)
    ]
    assert as_set(table.read()) == {(1, "eu", 1, "a")}


def test_two_merges_of_a_bucket_with_append_groups_overlap() -> None:
    storage, config = _shared_table()
    loser, winner = _rivals(storage, config)
    appended = append_like_spark(winner, rows((1, "eu", 1, "a")), rows((2, "eu", 1, "b")))

    def winner_merges_first() -> None:
        winner.write(rows((1, "eu", 2, "winner")))

    storage.hook = winner_merges_first
    with pytest.raises(OverlappingCommitConflict) as info:
        loser.write(rows((2, "eu", 2, "loser")))
    canonical = FileGroupId(partition_path="", file_id=bucket_file_id(0))
    both = {canonical, append_group(canonical, appended, 0), append_group(canonical, appended, 1)}
    assert info.value.file_group == min(str(g) for g in both)
    assert as_set(loser.read()) == {(1, "eu", 2, "winner"), (2, "eu", 1, "b")}


def test_a_merge_that_saw_no_append_group_overlaps_one_that_emptied_them() -> None:
    """The loser's snapshot predates the append; the winner's delete saw only the append
    group and emptied the bucket. They share no file group of either snapshot, yet overlap:
    the winner names the canonical group among the groups it replaced."""
    storage, config = _shared_table()
    loser, winner = _rivals(storage, config)

    def append_then_delete_it() -> None:
        append_like_spark(winner, rows((1, "eu", 1, "appended")))
        winner.write(pa.table({"id": [1]}), "delete")

    storage.hook = append_then_delete_it
    with pytest.raises(OverlappingCommitConflict) as info:
        loser.write(rows((1, "eu", 5, "loser")))
    assert info.value.file_group == bucket_file_id(0)
    assert loser.read().num_rows == 0


def test_an_append_racing_a_merge_of_its_bucket_commits_and_loses_nothing() -> None:
    """Append groups are unique per instant and task: an append never overlaps anything, and
    a merge replaces only the append groups of its own snapshot."""
    storage, config = _shared_table()
    table = Table(storage, config, coordinator=EmbeddedCoordinator())
    table.write(rows((1, "eu", 1, "a")))
    appended: list[str] = []
    storage.hook = lambda: appended.append(append_like_spark(table, rows((2, "eu", 1, "new"))))
    merged = table.write(rows((1, "eu", 2, "A")))
    assert merged.stats.replaced_file_groups == ()
    assert as_set(table.read()) == {(1, "eu", 2, "A"), (2, "eu", 1, "new")}
    later = table.write(rows((3, "eu", 1, "c")))
    canonical = FileGroupId(partition_path="", file_id=bucket_file_id(0))
    assert later.stats.replaced_file_groups == (append_group(canonical, appended[0], 0),)
    assert as_set(table.read()) == {(1, "eu", 2, "A"), (2, "eu", 1, "new"), (3, "eu", 1, "c")}


def test_partition_values_of_many_types_prune_correctly(tmp_path: Path) -> None:
    """A wrong partition expression would silently drop records: check every type we allow."""
    import datetime as dt

    schema = pa.schema(
        [
            ("id", pa.string()),
            ("day", pa.date32()),
            ("flag", pa.bool_()),
            ("at", pa.timestamp("ms", tz="UTC")),
            ("n", pa.int16()),
        ]
    )
    table = Table.create(
        str(tmp_path / "t"),
        name="t",
        record_key="id",
        schema=schema,
        partition_by=["day", "flag", "at", "n"],
    )
    day, at = dt.date(2024, 1, 2), dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    data = pa.table(
        {
            "id": ["a", "b", "c"],
            "day": [day, day, None],
            "flag": [True, False, None],
            "at": [at, at, None],
            "n": [-1, 7, None],
        },
        schema=schema,
    )
    table.write(data)
    paths = {s.file_group.partition_path for s in table.snapshot().base_files()}
    first = "day=2024-01-02/flag=true/at=2024-01-02 03%3A04%3A05.000Z/n=-1"
    assert first in paths
    cases = [
        (pc.field("day") == pa.scalar(day), {"a", "b"}),
        (pc.field("flag") == True, {"a"}),  # noqa: E712 (an Arrow expression, not a bool)
        (pc.field("at") == pa.scalar(at, pa.timestamp("ms", tz="UTC")), {"a", "b"}),
        (pc.field("n") == -1, {"a"}),
        (pc.field("n").is_null(), {"c"}),
        (pc.field("day").is_null() | (pc.field("n") == 7), {"b", "c"}),
    ]
    for condition, expected in cases:
        assert set(table.read(filter=condition)["id"].to_pylist()) == expected, condition
    # ...and each partition value does constrain its files (pruning is not silently off)
    expression = str(partition_expression(table.config, first))
    for column in ("day ==", "flag ==", "at ==", "n =="):
        assert column in expression


def test_partition_columns_read_from_their_paths_equal_the_stored_values(tmp_path: Path) -> None:
    """A scan takes a partition column from the file's partition path when every path fixes
    it (and from the files otherwise: the default partition); either way the rows, the
    types and the column order are the data's, in any projection, with filters."""
    import datetime as dt

    schema = pa.schema([("id", pa.string()), ("day", pa.date32()), ("n", pa.int16())])
    day = dt.date(2024, 1, 2)
    data = pa.table(
        {"id": ["a", "b", "c", "d"], "day": [day, day, day, day], "n": [-1, 7, 7, 300]},
        schema=schema,
    )
    table = Table.create(
        str(tmp_path / "t"), name="t", record_key="id", schema=schema, partition_by=["day", "n"]
    )
    table.write(data)
    assert table.read().sort_by("id").equals(data)
    assert table.read(columns=["n", "id"]).sort_by("id").equals(data.select(["n", "id"]))
    assert table.read(columns=["day"]).column("day").to_pylist() == [day] * 4
    assert table.read(filter=pc.field("n") == 7).sort_by("id").equals(data.slice(1, 2))
    meta = table.read(with_meta=True)
    assert meta.column_names[-3:] == ["id", "day", "n"]

    table.write(pa.table({"id": ["e"], "day": [None], "n": [7]}, schema=schema))  # default
    assert sorted(table.read().column("id").to_pylist()) == ["a", "b", "c", "d", "e"]
    assert table.read(filter=pc.field("day").is_null()).column("id").to_pylist() == ["e"]
