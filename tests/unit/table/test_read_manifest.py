"""Read manifests (``lakewarden.table.read_manifest``): written after each commit of a local
table, pruned without a listing per commit, and not written where nothing reads them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pyarrow as pa
import pytest
from _memstore import MemStorage

from lakewarden.api.table import Table
from lakewarden.storage import ObjectInfo
from lakewarden.storage.local import LocalStorage
from lakewarden.table import read_manifest
from lakewarden.table.config import TableConfig, save_new_config
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.snapshot import build_snapshot

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


def _table(storage: LocalStorage | MemStorage) -> Table:
    config = TableConfig.new(name="t", record_key="id", schema=SCHEMA, buckets=2)
    save_new_config(storage, config)
    return Table(storage, config, coordinator=EmbeddedCoordinator())


def _batch(i: int) -> pa.Table:
    return pa.table({"id": pa.array([i, i + 1]), "v": pa.array([f"v{i}"] * 2)}, schema=SCHEMA)


class _CountingLocal(LocalStorage):
    """Local storage counting the listings of the read manifests."""

    listings = 0

    def list(self, prefix: str = "", *, start_after: str | None = None) -> Iterator[ObjectInfo]:
        if prefix == read_manifest.PREFIX:
            type(self).listings += 1
        return super().list(prefix, start_after=start_after)


def _manifests(root: Path) -> list[str]:
    return sorted(p.name for p in (root / read_manifest.PREFIX).glob("*.json"))


def test_a_local_table_lists_its_manifests_once_per_keep_commits_and_keeps_them_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_CountingLocal, "listings", 0)
    table = _table(_CountingLocal(str(tmp_path)))
    commits = 3 * read_manifest.KEEP + 1
    for i in range(commits):
        table.write(_batch(i), "upsert")

    assert _CountingLocal.listings == 4  # the first write, then every KEEP-th
    assert not [p for p in (tmp_path / read_manifest.PREFIX).iterdir() if p.name.startswith(".")]
    names = _manifests(tmp_path)
    assert read_manifest.KEEP <= len(names) <= 2 * read_manifest.KEEP
    newest = json.loads((tmp_path / read_manifest.PREFIX / names[-1]).read_text())
    state = table.state()
    assert newest["seq"] == state.tail_seq
    assert newest["as_of"] == build_snapshot(state.completed()).as_of


def test_a_table_without_local_paths_writes_no_manifest() -> None:
    # The JVM side plans local tables only: a manifest elsewhere is a put per commit for nothing.
    storage = MemStorage()
    table = _table(storage)
    table.write(_batch(0), "insert")
    table.write(_batch(1), "upsert")
    assert not [o.key for o in storage.list(read_manifest.PREFIX)]
    assert table.timeline_log.after_completed is None


def test_the_manifest_after_each_commit_is_the_latest_snapshot_of_the_timeline(
    tmp_path: Path,
) -> None:
    # The hook builds snapshots incrementally; each must equal a replay of the whole timeline,
    # in the replay's order (what makes racing writers write the same bytes).
    table = _table(LocalStorage(str(tmp_path)))
    for i in range(5):
        table.write(_batch(i), "delete" if i == 3 else "upsert" if i % 2 else "insert")
        newest = json.loads(
            (tmp_path / read_manifest.PREFIX / _manifests(tmp_path)[-1]).read_text()
        )
        snapshot = build_snapshot(table.state().completed())
        assert newest["as_of"] == snapshot.as_of
        replayed = [s.base_file.path for s in snapshot.slices.values() if s.base_file]
        assert [f["path"] for f in newest["files"]] == replayed


def test_a_manifest_already_written_is_kept_and_no_temporary_file_is_left(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    table = _table(storage)
    table.write(_batch(0), "insert")
    [name] = _manifests(tmp_path)
    path = tmp_path / read_manifest.PREFIX / name
    before = path.read_bytes()
    assert read_manifest.write_latest(storage, table.config, table.timeline_log) is not None
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [name]


def test_the_hooks_manifest_is_the_bytes_of_one_written_from_scratch(tmp_path: Path) -> None:
    # The hook keeps each file's entry between commits (EncodedFiles) and splices the array
    # in: a manifest written without either must be the same bytes (racing writers agree).
    storage = LocalStorage(str(tmp_path))
    table = _table(storage)
    for i in range(4):
        table.write(_batch(10 * i), "insert" if i % 2 else "upsert")
    newest = tmp_path / read_manifest.PREFIX / _manifests(tmp_path)[-1]
    hooked = newest.read_bytes()
    newest.unlink()
    assert read_manifest.write_latest(storage, table.config, table.timeline_log) is not None
    assert newest.read_bytes() == hooked
    body = json.loads(hooked)
    assert list(body)[-1] == "files" and all(set(f) == {"path", "size"} for f in body["files"])


def test_a_commit_encodes_only_the_files_the_last_manifest_did_not_list(tmp_path: Path) -> None:
    table = _table(LocalStorage(str(tmp_path)))
    table.write(_batch(0), "insert")
    table.write(_batch(10), "insert")  # another append group in each bucket it has rows for
    with mock.patch.object(
        read_manifest, "_file_entry", wraps=read_manifest._file_entry
    ) as encoded:
        result = table.write(_batch(20), "insert")
    assert encoded.call_count == len(result.stats.write_stats)
