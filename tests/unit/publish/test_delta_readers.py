"""A table with publishing on is read by deltalake (delta-rs) and Polars, which share no code
with the writer, as lakewarden reads it: at the latest version and at every older version a
clean left readable, through inserts, upserts, deletes, a clustering, a compaction and a
clean, on copy-on-write and merge-on-read tables."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from delta_checks import (
    adds_and_removes,
    assert_every_version_matches,
    assert_latest_matches,
    instant_of,
    log_versions,
    row_set,
)

import lakewarden
from lakewarden.api.table import Table
from lakewarden.table.clean.policy import CleanPolicy

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("region", pa.string()),
        pa.field("ts", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("amount", pa.float64()),
        pa.field("day", pa.date32()),
    ]
)


def rows(*records: tuple[int, str, int, str | None]) -> pa.Table:
    import datetime

    return pa.table(
        {
            "id": [r[0] for r in records],
            "region": [r[1] for r in records],
            "ts": [r[2] for r in records],
            "name": [r[3] for r in records],
            "amount": [float(r[0]) * 1.5 for r in records],
            "day": [datetime.date(2024, 1, 1 + r[0] % 28) for r in records],
        },
        schema=SCHEMA,
    )


def make(tmp_path: Path, table_type: str) -> tuple[Table, Path]:
    root = tmp_path / "orders"
    table = Table.create(
        str(root),
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        ordering_field="ts",
        table_type=table_type,  # type: ignore[arg-type]
        buckets=2,
        publish_delta=True,
    )
    return table, root


def ingest(table: Table) -> None:
    table.write(rows(*[(i, "eu" if i % 2 else "us", 1, f"a{i}") for i in range(12)]), "insert")
    table.write(rows(*[(i, "eu" if i % 2 else "us", 2, f"b{i}") for i in range(0, 12, 3)]))
    table.write(rows(*[(i, "eu" if i % 2 else "us", 0, None) for i in range(1, 12, 4)]), "delete")
    table.write(rows((2, "us", 3, None), (40, "apac", 1, "new")), "upsert")


def test_version_zero_of_a_new_table_is_the_empty_table_with_its_schema(tmp_path: Path) -> None:
    _table, root = make(tmp_path, "cow")
    delta = deltalake.DeltaTable(str(root))
    assert delta.version() == 0
    assert delta.to_pyarrow_table().num_rows == 0
    assert delta.metadata().partition_columns == ["region"]
    assert [f.name for f in delta.schema().fields] == SCHEMA.names  # no _lw_ meta columns
    assert delta.protocol().min_reader_version == 1


def test_copy_on_write_table_reads_the_same_through_every_operation(tmp_path: Path) -> None:
    table, root = make(tmp_path, "cow")
    ingest(table)
    assert_latest_matches(table, root)
    clustering = table.schedule_clustering(sort_by=["ts"])
    assert clustering is not None
    table.run_table_service(clustering)
    assert_latest_matches(table, root)
    table.write(rows((7, "eu", 9, "after clustering")), "upsert")
    cleaned = table.clean(CleanPolicy(commits_retained=2, retention_window_s=0))
    assert cleaned.files_deleted > 0
    assert_latest_matches(table, root)
    # One version per completed instant, in completion order; nothing else.
    completed = [s.instant for s in table.state().completed()]
    versions = log_versions(root)
    assert [instant_of(root, v) for v in versions[1:]] == completed
    assert assert_every_version_matches(table, root, read_optimized=False) >= 3
    # A file is added once and removed at most once; every cleaned file was removed first.
    adds, removes = adds_and_removes(root)
    assert len(adds) == len(set(adds)) and len(removes) == len(set(removes))
    assert {f.path for f in cleaned.files} <= set(removes)


def test_merge_on_read_table_publishes_its_read_optimized_view(tmp_path: Path) -> None:
    table, root = make(tmp_path, "mor")
    ingest(table)
    assert_every_version_matches(table, root, read_optimized=True)
    compaction = table.schedule_compaction()
    assert compaction is not None
    table.run_table_service(compaction)
    # Every slice compacted: the read-optimized view is the table.
    assert_latest_matches(table, root)
    table.write(rows((5, "eu", 7, "pending in a log")), "upsert")
    delta = deltalake.DeltaTable(str(root))
    columns = SCHEMA.names
    assert row_set(delta.to_pyarrow_table(), columns) == row_set(
        lakewarden.read(str(root), as_of=str(compaction)), columns
    )
    assert delta.version() == len(table.state().completed())
    table.clean(CleanPolicy(commits_retained=1, retention_window_s=0))
    assert assert_every_version_matches(table, root, read_optimized=True) >= 2


def test_enable_publishes_the_current_snapshot_as_version_zero(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from lakewarden.cli import cli

    root = tmp_path / "plain"
    table = Table.create(str(root), name="plain", record_key="id", schema=SCHEMA)
    ingest(table)
    assert not (root / "_delta_log").exists()
    result = CliRunner().invoke(cli, ["publish", "enable", str(root)])
    assert result.exit_code == 0, result.output
    assert log_versions(root) == [0]
    assert_latest_matches(table, root)
    # A process that opens the table now publishes its commits itself.
    reopened = Table.open(str(root))
    reopened.write(rows((100, "eu", 1, "after enable")), "insert")
    assert log_versions(root) == [0, 1]
    assert_latest_matches(reopened, root)
    shown = CliRunner().invoke(cli, ["table", "show", str(root)])
    assert "published version 1" in shown.output and "up to date" in shown.output


def test_a_rolled_back_write_is_never_published(tmp_path: Path) -> None:
    from lakewarden.table.transaction import WriteTransaction

    table, root = make(tmp_path, "cow")
    table.write(rows((1, "eu", 1, "a")), "insert")
    txn = WriteTransaction.begin(
        table.timeline_log, table.coordinator, table.table_id, operation="insert", actor="t"
    )
    txn.rollback("test")
    table.write(rows((2, "eu", 1, "b")), "insert")
    versions = log_versions(root)
    assert txn.instant not in {instant_of(root, v) for v in versions}
    assert len(versions) == 1 + len(table.state().completed())
    assert_latest_matches(table, root)


@pytest.mark.parametrize("table_type", ["cow", "mor"])
def test_publishing_off_writes_no_delta_log(tmp_path: Path, table_type: str) -> None:
    root = tmp_path / "t"
    table = Table.create(
        str(root),
        name="t",
        record_key="id",
        schema=SCHEMA,
        table_type=table_type,  # type: ignore[arg-type]
    )
    table.write(rows((1, "eu", 1, "a")), "insert")
    assert not (root / "_delta_log").exists()


def test_checkpoints_every_ten_versions_are_read_by_deltalake_without_the_json_before(
    tmp_path: Path,
) -> None:
    table, root = make(tmp_path, "cow")
    for i in range(21):
        table.write(rows(*[(k, "eu" if k % 2 else "us", i, f"v{i}") for k in range(i, i + 3)]))
    log = root / "_delta_log"
    assert (log / f"{10:020d}.checkpoint.parquet").exists()
    assert (log / f"{20:020d}.checkpoint.parquet").exists()
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == 20
    # A copy whose JSON versions up to the checkpoint are gone reads the same: the reader
    # took the checkpoint.
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    for v in range(21):
        (copy / "_delta_log" / f"{v:020d}.json").unlink()
    columns = SCHEMA.names
    expected = row_set(lakewarden.read(str(root)), columns)
    delta = deltalake.DeltaTable(str(copy))
    assert delta.version() == 21
    assert row_set(delta.to_pyarrow_table(), columns) == expected
    assert_latest_matches(table, root)
