"""Delta's log retention follows lakewarden's: a clean that made every version before a
checkpoint unreadable deletes the JSON versions and checkpoints before it, never the newest
checkpoint or anything after; deltalake still reads the table and every version a clean left
readable, and publishing goes on from the trimmed log with the bytes a full log has."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import deltalake
import pytest
from delta_checks import assert_latest_matches, instant_of, log_versions, row_set
from deltalake.exceptions import TableNotFoundError
from test_delta_readers import SCHEMA, rows

import lakewarden
from lakewarden.api.table import Table
from lakewarden.publish import DeltaPublisher, enable
from lakewarden.publish.log import last_version
from lakewarden.table.clean.cleaned import InstantCleanedError
from lakewarden.table.clean.policy import CleanPolicy
from lakewarden.table.timeline import Timeline


def checkpoints(root: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (root / "_delta_log").glob("*.checkpoint.*"))


def make(root: Path) -> Table:
    return Table.create(
        str(root),
        name="t",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        buckets=1,
        publish_delta=True,
    )


def upsert(table: Table, i: int) -> None:
    """Rewrites the one file of partition ``eu``: each version removes the previous one's."""
    table.write(rows(*[(k, "eu", i, f"v{i}") for k in (1, 3, 5)]))


def readable_versions_match(table: Table, root: Path) -> list[int]:
    """Every version the log still has reads in deltalake as lakewarden reads its instant;
    returns the versions compared."""
    columns = SCHEMA.names
    compared = []
    for version in log_versions(root):
        instant = instant_of(root, version)
        if instant is None:
            continue  # version 0, the empty table
        try:
            expected = row_set(lakewarden.read(str(root), as_of=instant), columns)
        except InstantCleanedError:
            continue
        delta = deltalake.DeltaTable(str(root), version=version)
        assert row_set(delta.to_pyarrow_table(), columns) == expected, f"version {version}"
        compared.append(version)
    return compared


def test_a_clean_trims_the_log_to_the_checkpoint_before_the_oldest_readable_version(
    tmp_path: Path,
) -> None:
    root = tmp_path / "t"
    table = make(root)
    for i in range(24):
        upsert(table, i)
    assert checkpoints(root) == [10, 20]
    # A twin that keeps every data file, to publish a full log of the same timeline at the end.
    copy = tmp_path / "copy"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("_delta_log"))
    cleaned = table.clean(CleanPolicy(commits_retained=2, retention_window_s=0))
    assert cleaned.files_deleted > 0
    # Versions before 23 lost their file to the clean; the newest checkpoint not after the
    # oldest readable version is 20: the log starts there.
    assert log_versions(root) == list(range(20, 26))
    assert checkpoints(root) == [20]
    assert json.loads((root / "_delta_log" / "_last_checkpoint").read_text())["version"] == 20
    assert_latest_matches(table, root)
    assert readable_versions_match(table, root) == [23, 24, 25]
    with pytest.raises(TableNotFoundError):  # its JSON is gone, like its files
        deltalake.DeltaTable(str(root), version=5)

    # Publishing goes on from the trimmed log: the commit hook, a fresh publisher (it learns
    # what version 0 held from the checkpoint) and the next checkpoint built on version 20's.
    for i in range(24, 30):
        upsert(table, i)
    fresh = Table.open(str(root))
    result = DeltaPublisher(fresh.storage, fresh.config, Timeline(fresh.storage)).sync()
    assert result.written == () and result.status.lag == 0
    assert last_version(fresh.storage) == 31
    assert checkpoints(root) == [20, 30]
    assert_latest_matches(table, root)
    # The same bytes as a full log of the twin published from scratch.
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("_delta_log"), dirs_exist_ok=True)
    again = Table.open(str(copy))
    DeltaPublisher(again.storage, again.config, Timeline(again.storage)).sync()
    for version in log_versions(root):
        name = f"{version:020d}.json"
        assert (root / "_delta_log" / name).read_bytes() == (
            copy / "_delta_log" / name
        ).read_bytes(), name


def test_versions_a_clean_left_readable_keep_their_json(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table = make(root)
    table.write(rows((2, "us", 0, "kept")), "insert")  # version 1: its file is never replaced
    for i in range(1, 24):
        upsert(table, i)  # versions 2..24
    table.clean(CleanPolicy(commits_retained=2, retention_window_s=0))
    # Version 1 names only the us file, which no clean deleted: it is readable, and so
    # nothing before it may go (version 0, the empty table, is kept with it).
    assert log_versions(root)[0] == 0
    assert checkpoints(root) == [10, 20]
    assert 1 in readable_versions_match(table, root)


def test_a_clean_within_the_retention_of_every_checkpoint_trims_nothing(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table = make(root)
    for i in range(24):
        upsert(table, i)
    table.clean(CleanPolicy(commits_retained=20, retention_window_s=0))
    # Versions from 4 on are readable: no checkpoint is at or before 4 except none at all.
    assert log_versions(root)[0] == 0
    assert readable_versions_match(table, root)[0] <= 5


def test_an_interrupted_trim_is_finished_by_the_next(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table = make(root)
    for i in range(24):
        upsert(table, i)
    log = root / "_delta_log"
    from lakewarden.publish.retention import trim_log

    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    table.clean(CleanPolicy(commits_retained=2, retention_window_s=0))
    # Recreate what a trim killed after deleting versions 0..6 leaves: copy back the rest.
    assert log_versions(root)[0] == 20
    again = Table.open(str(copy))
    DeltaPublisher(again.storage, again.config, Timeline(again.storage)).sync()
    for v in range(7, 20):
        shutil.copy(copy / "_delta_log" / f"{v:020d}.json", log)
    shutil.copy(copy / "_delta_log" / f"{10:020d}.checkpoint.parquet", log)
    result = trim_log(table.storage, table.config, table.state())
    assert result.start == 20
    assert log_versions(root) == list(range(20, 26))
    assert checkpoints(root) == [20]
    assert_latest_matches(table, root)


def test_an_enabled_table_publishes_on_from_a_trimmed_log(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table = Table.create(
        str(root), name="t", record_key="id", schema=SCHEMA, partition_by=["region"], buckets=1
    )
    for i in range(3):
        upsert(table, i)
    enable(table.storage, table.config, Timeline(table.storage))
    table = Table.open(str(root))
    for i in range(3, 27):
        upsert(table, i)
    table.clean(CleanPolicy(commits_retained=2, retention_window_s=0))
    assert log_versions(root)[0] == 20
    for i in range(27, 30):
        upsert(table, i)
    # A fresh publisher, whose version 0 is gone, learns from the checkpoint what it held.
    fresh = Table.open(str(root))
    publisher = DeltaPublisher(fresh.storage, fresh.config, Timeline(fresh.storage))
    status = publisher.status()
    assert status.lag == 0 and status.published_version == 28
    assert status.published_instant == table.state().completed()[-1].instant
    assert publisher.sync().written == ()
    assert_latest_matches(table, root)
    assert readable_versions_match(table, root)[-1] == 28
