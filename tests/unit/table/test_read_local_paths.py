"""A read asks storage for a data file's local path once, just before pyarrow opens it, and
never for a file it does not open. The campaign's interleaving test places a rival write and
clean before each ``local_path`` call of a reader: a second call per file (or one for a file
that is pruned) would be an extra, meaningless interleaving point and extra work per file."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from lakewarden.api.table import Table
from lakewarden.storage.local import LocalStorage
from lakewarden.table.config import load_config
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.testing import CallRecorder

SCHEMA = pa.schema([("key", pa.string()), ("part", pa.string()), ("ts", pa.int64())])


def _table(root: Path, table_type: Literal["cow", "mor"]) -> None:
    """Two partitions, two buckets, three upserts (merge-on-read: log files on base files)."""
    table = Table.create(
        str(root),
        name="t",
        record_key="key",
        schema=SCHEMA,
        partition_by=["part"],
        ordering_field="ts",
        buckets=2,
        table_type=table_type,
        coordinator=EmbeddedCoordinator(),
    )
    for version in (1, 2, 3):
        keys = range(version * 3, version * 3 + 6)
        rows = [{"key": f"k{k}", "part": f"p{k % 2}", "ts": version} for k in keys]
        table.write(pa.Table.from_pylist(rows, schema=SCHEMA), "upsert")


def _reader(root: Path) -> tuple[Table, CallRecorder]:
    recorder = CallRecorder(LocalStorage(str(root)))
    table = Table(recorder, load_config(recorder), coordinator=EmbeddedCoordinator())
    table.state()  # the timeline is loaded before the calls counted
    recorder.clear()
    return table, recorder


def _local_paths(recorder: CallRecorder) -> Counter[str]:
    return Counter(recorder.keys("local_path"))


def _data_files(table: Table, partition: str = "") -> set[str]:
    return {s.path for s in table.snapshot().base_files() if s.path.startswith(partition)}


def test_a_full_read_asks_each_data_file_local_path_once(tmp_path: Path) -> None:
    _table(tmp_path, "cow")
    table, recorder = _reader(tmp_path)
    assert table.read().num_rows == 12  # every column: the partition column's values too
    asked = _local_paths(recorder)
    assert set(asked) == _data_files(table)
    assert set(asked.values()) == {1}, asked


def test_a_read_of_some_columns_asks_each_data_file_local_path_once(tmp_path: Path) -> None:
    _table(tmp_path, "cow")
    table, recorder = _reader(tmp_path)
    table.read(columns=["key", "ts"])
    asked = _local_paths(recorder)
    assert set(asked) == _data_files(table)
    assert set(asked.values()) == {1}, asked


def test_a_filtered_merge_on_read_asks_only_for_the_files_it_opens_once(tmp_path: Path) -> None:
    _table(tmp_path, "mor")
    table, recorder = _reader(tmp_path)
    assert table.read(filter=pc.field("part") == "p0").num_rows == 6
    asked = _local_paths(recorder)
    assert _data_files(table, "part=p0/") <= set(asked)
    assert not [key for key in asked if key.startswith("part=p1/")], asked  # pruned: not opened
    assert set(asked.values()) == {1}, asked
