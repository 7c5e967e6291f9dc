"""Merge-on-read through Spark: apache/hudi#10803's data loss cannot happen here.

Task retries and speculative attempts append their own log blocks beside the accepted
attempt's; a zombie appends after the commit; a writer dies mid-block; a file gets duplicated
bytes. Invariant 7: none of it changes a read, and every committed record is read exactly once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from _spark_helpers import SCHEMA, files_on_disk, rows, sorted_rows, spark_df, spark_rows
from pyspark.sql.types import LongType, StructField, StructType

import lakewarden
from lakewarden.api.table import Table
from lakewarden.devstack.s3 import DEV_ACCESS_KEY, DEV_SECRET_KEY
from lakewarden.logfile import LogWriter, encode_records, scan_log, select_by_sequence
from lakewarden.settings import Settings
from lakewarden.spark import _job
from lakewarden.spark._messages import TaskCommitMessage
from lakewarden.spark._options import InvalidOptionError, ReadSpec, encode_settings
from lakewarden.spark._reader import FilePartition, LakewardenReader, SlicePartition, table_schema
from lakewarden.spark._task import TaskIdentity, write_task
from lakewarden.spark._writer import create_writer
from lakewarden.table.files import is_log_file
from lakewarden.table.instant import Action, Transition
from lakewarden.testing.faults import fault_plan, first_attempt

pytestmark = pytest.mark.spark


def make_mor_table(path: Path, buckets: int = 2) -> Table:
    return Table.create(
        str(path),
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        ordering_field="ts",
        buckets=buckets,
        table_type="merge_on_read",
    )


def log_paths(table: Table) -> list[str]:
    return sorted({s.path for sl in table.snapshot().slices.values() for s in sl.log_files})


def attempts_in(table: Table, path: str) -> set[str | None]:
    return {b.attempt for b in scan_log(table.storage.read(path), path).blocks}


def keys_once(records: list[dict[str, Any]]) -> bool:
    ids = [r["id"] for r in records]
    return len(ids) == len(set(ids))


def test_retried_attempts_append_blocks_yet_every_committed_record_is_read_once(
    spark: Any, table_dir: Path
) -> None:
    table = make_mor_table(table_dir)
    uri = str(table_dir)
    base = rows(range(40), ts=1)
    table.write(base, "upsert")  # canonical base files: the upsert appends log blocks
    update = rows(range(0, 40, 2), ts=2, note="v2")
    # Attempt 0 of every task dies: partition 0 right after appending its log block,
    # partition 1 after its task commit (its blocks and its manifest exist). Spark retries.
    with fault_plan(first_attempt(0, point="spark.task.after_log_append"), first_attempt(1)):
        result = lakewarden.spark.write(spark_df(spark, update), uri, "upsert", partitions=2)

    assert table.state().get(result.instant).action is Action.DELTACOMMIT  # type: ignore[union-attr]
    logs = [s for s in result.stats.write_stats if s.is_log]
    # The failed attempts' blocks are on disk (a first log file is created per attempt; later
    # appends share the file, see the next test)...
    on_disk = [p for p in files_on_disk(table_dir) if is_log_file(Path(p).name)]
    attempts = set().union(*(attempts_in(table, p) for p in on_disk))
    assert len(on_disk) > len(log_paths(table))
    assert logs and attempts > {s.log_attempt for s in logs}
    # ... and each committed block is its task's retry: the committer attempt is named
    # attempt_<job>_<task>_<Spark's task attempt id>, which grows with every attempt.
    latest: dict[int, int] = {}
    for attempt in attempts - {None}:
        task, number = (int(part) for part in str(attempt).rsplit("_", 2)[1:])
        latest[task] = max(latest.get(task, number), number)
    committed = {tuple(int(p) for p in str(s.log_attempt).rsplit("_", 2)[1:]) for s in logs}
    assert committed == set(latest.items())
    # ... and change nothing: every record once, the update applied once.
    expected = {r["id"]: r for r in sorted_rows(base)} | {r["id"]: r for r in sorted_rows(update)}
    back = spark_rows(spark.read.format("lakewarden").load(uri))
    assert keys_once(back) and back == [expected[k] for k in sorted(expected)]
    assert sorted_rows(lakewarden.read(uri)) == back
    assert sorted_rows(table.changes(result.instant)) == []


def _attempt(spec: Any, number: int, data: pa.Table) -> TaskCommitMessage:
    return write_task(spec, TaskIdentity(0, number, 5), iter(data.to_batches()))


def test_the_accepted_attempt_wins_where_hudis_sequence_rule_loses_data(table_dir: Path) -> None:
    """#10803: two attempts of one task both append; Spark accepts the first to finish, the
    speculative one finishes later (and, with a non-deterministic input, wrote other values).
    HUDI-6758's rule keeps the latest of equal sequences: the attempt Spark rejected."""
    table = make_mor_table(table_dir, buckets=1)
    table.write(rows(range(10), ts=1), "upsert")
    handle = _job.TableHandle.open(str(table_dir), None)
    spec, _ = _job.open_write(handle, "upsert", settings_json=None, merge=True)
    accepted = _attempt(spec, 0, rows(range(5), ts=2, note="accepted"))
    _attempt(spec, 1, rows(range(3), ts=3, note="speculative"))
    _job.commit_write(spec, [accepted])

    expected = sorted_rows(rows(range(5), ts=2, note="accepted")) + sorted_rows(
        rows(range(5, 10), ts=1)
    )
    assert sorted_rows(table.read()) == expected
    # Hudi lists the file group's log files, in version and write-token order.
    listed = sorted(
        p
        for p in files_on_disk(table_dir)
        if is_log_file(Path(p).name) and p.startswith("region=eu/")
    )
    assert len(listed) == 2  # each attempt started the slice's first log file
    scans = [scan_log(table.storage.read(p), p) for p in listed]
    hudi = select_by_sequence(scans, [spec.instant]).blocks
    assert {b.records().column("note")[0].as_py() for b in hudi} == {"speculative"}

    # A zombie attempt appends after the commit, a writer dies mid-block, bytes get
    # duplicated: the read does not change.
    path = log_paths(table)[0]
    zombie = LogWriter(
        table.storage, path, instant=spec.instant, attempt="attempt_zombie_0_9", append=True
    )
    zombie.add_data(pa.table({"x": [1]}))
    zombie.flush()
    committed = table.storage.read(path)
    table.storage.append(path, committed)  # duplicated bytes
    table.storage.append(path, committed[: len(committed) // 3])  # a torn last block
    table.storage.append(path, encode_records(pa.table({"y": [0]})))  # not a block at all
    scan = scan_log(table.storage.read(path), path)
    assert len(scan.corrupt) >= 1
    assert sorted_rows(table.read()) == expected
    assert [i.state for i in table.timeline()] == [Transition.COMPLETED] * 2


@pytest.mark.s3
def test_on_s3_each_attempt_writes_its_own_log_version_and_only_the_accepted_one_counts(
    s3_settings: Settings, s3_bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tasks read their credentials from their own environment, as executors do (conftest).
    monkeypatch.setenv("LAKEWARDEN_S3__ACCESS_KEY_ID", DEV_ACCESS_KEY)
    monkeypatch.setenv("LAKEWARDEN_S3__SECRET_ACCESS_KEY", DEV_SECRET_KEY)
    uri = f"s3://{s3_bucket}/spark-mor/{tmp_path.name}"
    table = Table.create(
        uri,
        name="orders",
        record_key="id",
        schema=SCHEMA,
        ordering_field="ts",
        table_type="merge_on_read",
        settings=s3_settings,
    )
    table.write(rows(range(6), ts=1), "upsert")
    encoded = encode_settings(s3_settings)
    handle = _job.TableHandle.open(uri, encoded)
    spec, _ = _job.open_write(handle, "upsert", settings_json=encoded, merge=True)
    rejected = _attempt(spec, 0, rows(range(4), ts=2, note="rejected"))
    accepted = _attempt(spec, 1, rows(range(2), ts=2, note="accepted"))
    # No append on S3: each attempt wrote a log file version of its own.
    assert {s.path for s in rejected.write_stats}.isdisjoint({s.path for s in accepted.write_stats})
    _job.commit_write(spec, [accepted])
    expected = sorted_rows(rows(range(2), ts=2, note="accepted")) + sorted_rows(
        rows(range(2, 6), ts=1)
    )
    assert sorted_rows(table.read()) == expected


def _filtered_table(table_dir: Path) -> Table:
    """A merge-on-read table where an upsert changes which records match note == "x": every
    slice has log blocks (ids 0..11: region us for multiples of 3, eu otherwise)."""
    table = make_mor_table(table_dir)
    table.write(rows(range(12), ts=1, note="x"), "upsert")
    table.write(rows(range(0, 12, 2), ts=2, note="y"), "upsert")
    table.write(rows([1, 3], ts=3, note="x"), "upsert")
    return table


FILTERS = '[["note", "=", "x"], ["region", "=", "eu"]]'


def test_the_filters_option_prunes_slices_at_planning_and_filters_after_the_merge(
    table_dir: Path,
) -> None:
    table = _filtered_table(table_dir)
    expected = table.read(filter=(pc.field("note") == "x") & (pc.field("region") == "eu"))
    spec = ReadSpec.parse({"path": str(table_dir), "filters": FILTERS, "columns": "id,ts"})
    reader = LakewardenReader(spec, table_schema(spec))
    parts = reader.partitions()
    # Only the eu slices are planned (the us ones hold no record the filter can keep).
    assert parts and all(isinstance(p, SlicePartition) for p in parts)
    assert {p.file_slice.file_group.partition_path for p in parts} == {"region=eu"}  # type: ignore[attr-defined]
    batches = [b for p in parts for b in reader.read(p)]
    got = pa.Table.from_batches(batches) if batches else None
    assert got is not None and got.column_names == ["id", "ts"]
    assert sorted(got.to_pylist(), key=lambda r: r["id"]) == sorted(
        expected.select(["id", "ts"]).to_pylist(), key=lambda r: r["id"]
    )
    with pytest.raises(InvalidOptionError, match="filters"):
        LakewardenReader(
            ReadSpec.parse({"path": str(table_dir), "filters": "note = x"}), table_schema(spec)
        )


def test_the_filters_option_prunes_and_filters_plain_parquet_files_too(table_dir: Path) -> None:
    table = make_mor_table(table_dir)
    table.write(rows(range(12), ts=1, note="x"), "insert")  # base files (append groups), no logs
    table.write(rows(range(0, 12, 2), ts=2, note="y"), "insert")  # more append groups
    spec = ReadSpec.parse({"path": str(table_dir), "filters": FILTERS, "columns": "id"})
    reader = LakewardenReader(spec, table_schema(spec))
    parts = reader.partitions()
    assert parts and all(isinstance(p, FilePartition) for p in parts)
    assert all(p.key.startswith("region=eu/") for p in parts)  # type: ignore[attr-defined]
    got = pa.Table.from_batches([b for p in parts for b in reader.read(p)])
    expected = table.read(
        columns=["id"], filter=(pc.field("note") == "x") & (pc.field("region") == "eu")
    )
    assert got.column_names == ["id"] and sorted(got.column("id").to_pylist()) == sorted(
        expected.column("id").to_pylist()
    )


def test_a_spark_read_with_the_filters_option_equals_the_python_read(
    spark: Any, table_dir: Path
) -> None:
    table = _filtered_table(table_dir)
    frame = spark.read.format("lakewarden").option("filters", FILTERS).load(str(table_dir))
    expected = table.read(filter=(pc.field("note") == "x") & (pc.field("region") == "eu"))
    assert spark_rows(frame) == sorted_rows(expected) and len(expected) > 0


def test_the_table_type_option_refuses_a_write_to_a_table_of_the_other_type(
    table_dir: Path,
) -> None:
    table = make_mor_table(table_dir)
    schema = StructType([StructField("id", LongType(), False)])
    for wrong in ("copy_on_write", "cow", "bogus"):
        with pytest.raises(InvalidOptionError, match="table_type"):
            create_writer({"path": str(table_dir), "table_type": wrong}, schema, False)
    assert table.timeline() == []  # refused before any instant was opened
