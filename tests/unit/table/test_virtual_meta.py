"""Format version 2: base files leave out ``_lw_partition_path`` and ``_lw_file_name`` (their
key gives both) and every reader fills them in; version 1 tables keep storing all four.

What the files hold is checked with plain ``pyarrow.parquet`` (no lakewarden reader), and the
meta values a reader gives are compared between a version 1 and a version 2 table that saw
the same writes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lakewarden.api.table import Table
from lakewarden.table.config import (
    FORMAT_VERSION,
    META_COLUMNS,
    META_COMMIT_TIME,
    META_FILE_NAME,
    META_PARTITION_PATH,
    META_RECORD_KEY,
    InvalidTableConfigError,
    TableConfig,
    load_config,
)

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("region", pa.string()),
        pa.field("ts", pa.int64()),
        pa.field("v", pa.string()),
    ]
)
_INSTANT = re.compile(r"\d{17}")
# A table service's write token carries a random stage number: the same in no two tables.
_TOKEN = re.compile(r"_(\d+)-\d+-(\d+)_")


def rows(ids: range, region: str, ts: int, tag: str) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": i, "region": region, "ts": ts, "v": f"{tag}{i}"} for i in ids], schema=SCHEMA
    )


def make(tmp_path: Path, name: str, version: int, table_type: str = "cow") -> Table:
    return Table.create(
        str(tmp_path / name),
        name=name,
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        ordering_field="ts",
        table_type=table_type,  # type: ignore[arg-type]
        buckets=2,
        format_version=version,
    )


def history(table: Table) -> None:
    """Inserts into two partitions, an upsert that moves nothing and one that rewrites, a
    delete: every writer path of a table."""
    table.write(rows(range(0, 40), "eu", 1, "a"), "insert")
    table.write(rows(range(40, 60), "us/west=1", 1, "b"), "insert")  # '/' and '=' escaped
    table.write(rows(range(10, 40, 3), "eu", 2, "c"), "upsert")
    table.write(rows(range(5, 9), "eu", 3, "d"), "delete")


def data_files(table: Table) -> list[Path]:
    root = Path(table.storage.uri.removeprefix("file://"))
    return sorted(p for p in root.rglob("*.parquet") if ".lakewarden" not in p.parts)


def normalized(table: pa.Table) -> list[dict[str, Any]]:
    """Rows by id, each instant replaced by its rank among the instants the rows name, and
    the stage of write tokens left out."""
    instants = sorted(
        {
            m
            for column in (META_COMMIT_TIME, META_FILE_NAME)
            for value in table.column(column).to_pylist()
            for m in _INSTANT.findall(value)
        }
    )
    rank = {instant: f"<{i}>" for i, instant in enumerate(instants)}

    def plain(record: dict[str, Any]) -> dict[str, Any]:
        def text(v: str) -> str:
            return _TOKEN.sub(r"_\1-*-\2_", _INSTANT.sub(lambda m: rank[m.group(0)], v))

        return {k: text(v) if isinstance(v, str) else v for k, v in record.items()}

    return [plain(r) for r in table.sort_by("id").to_pylist()]


def test_new_tables_are_version_2_and_version_1_can_be_chosen(tmp_path: Path) -> None:
    assert FORMAT_VERSION == 2
    assert make(tmp_path, "new", FORMAT_VERSION).config.format_version == 2
    old = make(tmp_path, "old", 1)
    assert load_config(old.storage).format_version == 1
    assert old.config.virtual_columns == ()
    assert old.config.stored_schema == old.config.file_schema


def test_an_unknown_format_version_is_refused() -> None:
    with pytest.raises(InvalidTableConfigError, match="format_version"):
        TableConfig.new(name="t", record_key="id", schema=SCHEMA, format_version=0)


@pytest.mark.parametrize("version", [1, 2])
def test_what_base_files_store(tmp_path: Path, version: int) -> None:
    """Read with plain pyarrow: a version 2 file has the commit time, the key text and the
    table's columns; a version 1 file all four meta columns as before."""
    table = make(tmp_path, "t", version)
    history(table)
    files = data_files(table)
    assert files
    for path in files:
        stored = pq.read_table(path, partitioning=None)
        meta = [n for n in stored.schema.names if n.startswith("_lw_")]
        if version == 1:
            assert meta == list(META_COLUMNS)
            assert set(stored.column(META_FILE_NAME).to_pylist()) == {path.name}
        else:
            assert meta == [META_COMMIT_TIME, META_RECORD_KEY]
        assert stored.schema.names[len(meta) :] == SCHEMA.names


@pytest.mark.parametrize("table_type", ["cow", "mor"])
def test_readers_give_version_2_the_meta_values_of_version_1(
    tmp_path: Path, table_type: str
) -> None:
    old, new = make(tmp_path, "v1", 1, table_type), make(tmp_path, "v2", 2, table_type)
    for table in (old, new):
        history(table)
    before = normalized(old.read(with_meta=True))
    assert before == normalized(new.read(with_meta=True))
    assert {r[META_PARTITION_PATH] for r in before} == {"region=eu", "region=us%2Fwest%3D1"}
    # The file name is the base file (or, merged on read, the latest file) holding the row.
    names = {Path(p).name for p in map(str, data_files(new))}
    if table_type == "cow":
        assert set(new.read(with_meta=True).column(META_FILE_NAME).to_pylist()) <= names
    # Incremental reads, a projection of one virtual column, a filter on one.
    for table in (old, new):
        assert table.read(columns=[META_FILE_NAME]).schema.names == [META_FILE_NAME]
    assert normalized(old.changes(None, with_meta=True)) == normalized(
        new.changes(None, with_meta=True)
    )
    where = pc.field(META_PARTITION_PATH) == "region=eu"
    assert normalized(old.read(filter=where, with_meta=True)) == normalized(
        new.read(filter=where, with_meta=True)
    )


@pytest.mark.parametrize("table_type", ["cow", "mor"])
def test_table_services_keep_the_meta_values(tmp_path: Path, table_type: str) -> None:
    """Compaction (merge-on-read) and clustering (copy-on-write) read base files through
    their own readers and write new ones: the values stay those of a version 1 table."""
    old, new = make(tmp_path, "v1", 1, table_type), make(tmp_path, "v2", 2, table_type)
    for table in (old, new):
        history(table)
        table.write(rows(range(0, 20, 2), "eu", 4, "e"), "insert")
        if table_type == "mor":
            service = table.schedule_compaction()
        else:
            service = table.schedule_clustering(sort_by=["ts"])
        assert service is not None
        table.run_table_service(service)
    after = normalized(new.read(with_meta=True))
    assert after == normalized(old.read(with_meta=True))
    # Clustering and compaction keep each record's commit time (incremental reads use it).
    assert len({r[META_COMMIT_TIME] for r in after}) > 1
    for path in data_files(new):
        assert META_FILE_NAME not in pq.read_schema(path).names


def test_a_version_1_table_stays_readable_and_writable(tmp_path: Path) -> None:
    """A table made by lakewarden before version 2 (config without the new default) opens,
    takes writes that store all four meta columns, and reads as it did."""
    old = make(tmp_path, "v1", 1)
    history(old)
    reopened = Table.open(old.storage.uri)
    assert reopened.config.format_version == 1
    reopened.write(rows(range(100, 110), "eu", 5, "f"), "upsert")
    for path in data_files(reopened):
        assert set(META_COLUMNS) <= set(pq.read_schema(path).names)
    read = reopened.read(with_meta=True)
    assert read.num_rows == 60 - 4 + 10
    assert read.filter(pc.field("id") == 100).column(META_PARTITION_PATH).to_pylist() == [
        "region=eu"
    ]


def test_arrow_dataset_of_version_2(tmp_path: Path) -> None:
    new = make(tmp_path, "v2", 2)
    history(new)
    dataset = new.to_arrow_dataset()
    assert dataset.schema.names == SCHEMA.names
    assert dataset.to_table().num_rows == 56
