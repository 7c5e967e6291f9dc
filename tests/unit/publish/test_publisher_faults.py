"""Exactly once and in order under faults: racing publishers write one log, a publisher
killed between versions resumes with no gap, no duplicate and the bytes a clean run writes,
and a clean deletes nothing the published log still names."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import deltalake
import pytest
from delta_checks import adds_and_removes, assert_latest_matches, log_versions, row_set
from test_delta_readers import SCHEMA, rows

from lakewarden.api.table import Table
from lakewarden.publish import DeltaPublisher
from lakewarden.publish.gate import RemoveNotPublishedError
from lakewarden.storage import StorageIOError
from lakewarden.table.clean.policy import CleanPolicy
from lakewarden.table.instant import Transition
from lakewarden.table.timeline import Timeline

COMMITS = 10


def unpublished_table(root: Path) -> Table:
    """A table with publishing on whose commits (after version 0) were not published: its
    writer's after-completed hook is detached."""
    table = Table.create(
        str(root),
        name="t",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        buckets=2,
        publish_delta=True,
    )
    table.timeline_log.after_completed = None
    for i in range(COMMITS):
        table.write(rows(*[(k, "eu" if k % 2 else "us", i, f"v{i}") for k in range(i, i + 4)]))
    assert log_versions(root) == [0]
    return table


def publisher(root: Path) -> DeltaPublisher:
    table = Table.open(str(root))
    return DeltaPublisher(table.storage, table.config, Timeline(table.storage))


def clean_run_bytes(root: Path, tmp_path: Path) -> dict[int, bytes]:
    """What one publisher alone writes for a copy of the table."""
    copy = tmp_path / "clean-run"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("_delta_log"))
    publisher(copy).sync()
    return {v: _version_bytes(copy, v) for v in log_versions(copy)}


def _version_bytes(root: Path, version: int) -> bytes:
    return (root / "_delta_log" / f"{version:020d}.json").read_bytes()


def test_racing_publishers_write_one_log(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table = unpublished_table(root)
    start = threading.Barrier(4)
    errors: list[BaseException] = []

    def run() -> None:
        mine = publisher(root)
        start.wait()
        try:
            for _ in range(3):
                mine.sync()
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert log_versions(root) == list(range(COMMITS + 1))
    assert {v: _version_bytes(root, v) for v in log_versions(root)} == clean_run_bytes(
        root, tmp_path
    )
    adds, _ = adds_and_removes(root)
    assert len(adds) == len(set(adds))
    assert_latest_matches(table, root)


_SLOW_PUBLISHER = textwrap.dedent(
    """
    import sys
    from lakewarden.publish import DeltaPublisher
    from lakewarden.api.table import Table

    table = Table.open(sys.argv[1])
    write = table.storage.write_if_absent

    def slow(key, data):
        write(key, data)
        if key.startswith("_delta_log/"):
            print(key, flush=True)
            sys.stdin.readline()  # the test says go on, or kills this process here

    table.storage.write_if_absent = slow
    DeltaPublisher(table.storage, table.config, table.timeline_log).sync()
    """
)


def test_a_publisher_killed_between_versions_resumes_with_no_gap_or_duplicate(
    tmp_path: Path,
) -> None:
    root = tmp_path / "t"
    table = unpublished_table(root)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with subprocess.Popen(
        [sys.executable, "-c", _SLOW_PUBLISHER, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        written = []
        for n in range(3):
            written.append(proc.stdout.readline())
            if n < 2:
                proc.stdin.write("go\n")
                proc.stdin.flush()
        os.kill(proc.pid, signal.SIGKILL)  # between the third version and the fourth
        proc.wait()
    assert all(w.startswith("_delta_log/") for w in written)
    published = log_versions(root)
    assert 3 <= len(published) < COMMITS + 1 and published == list(range(len(published)))

    result = publisher(root).sync()
    assert result.written == tuple(range(len(published), COMMITS + 1))
    assert log_versions(root) == list(range(COMMITS + 1))
    assert {v: _version_bytes(root, v) for v in log_versions(root)} == clean_run_bytes(
        root, tmp_path
    )
    assert_latest_matches(table, root)


def test_a_lost_reply_on_a_version_write_is_reconciled_by_reading_it(tmp_path: Path) -> None:
    root = tmp_path / "t"
    unpublished_table(root)
    mine = publisher(root)
    write = mine.storage.write_if_absent
    lost: list[str] = []

    def landed_but_lost(key: str, data: bytes) -> None:
        write(key, data)
        if key.endswith("00000000000000000003.json") and not lost:
            lost.append(key)
            raise StorageIOError("reply lost", key=key)

    mine.storage.write_if_absent = landed_but_lost  # type: ignore[method-assign]
    mine.sync()
    assert lost and log_versions(root) == list(range(COMMITS + 1))


def test_a_clean_deletes_no_file_whose_remove_is_not_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "t"
    table = unpublished_table(root)
    publisher(root).sync()
    columns = SCHEMA.names
    published = row_set(table.read(), columns)
    for i in range(3):  # superseding every file the published log names, unpublished
        table.write(rows(*[(k, "eu" if k % 2 else "us", 99, f"w{i}") for k in range(20)]))

    def down(self: DeltaPublisher) -> None:
        raise StorageIOError("the store is down for the publisher")

    monkeypatch.setattr(DeltaPublisher, "sync", down)
    with pytest.raises(RemoveNotPublishedError, match="not published yet"):
        table.clean(CleanPolicy(commits_retained=1, retention_window_s=0))
    pending = [i for i in table.state().pending() if str(i.action) == "clean"]
    assert pending, "the clean stays pending"
    plan_files = [f.path for f in pending[0].plan.files]  # type: ignore[union-attr]
    assert plan_files and all((root / p).exists() for p in plan_files)
    # The published log's files are all there: its latest version reads as its instant.
    assert row_set(deltalake.DeltaTable(str(root)).to_pyarrow_table(), columns) == published

    monkeypatch.undo()
    table.clean(
        CleanPolicy(commits_retained=1, retention_window_s=0)
    )  # publishes, then the pending clean resumes
    assert not any((root / p).exists() for p in plan_files)
    clean = table.state().get(pending[0].instant)
    assert clean is not None and clean.state is Transition.COMPLETED
    assert_latest_matches(table, root)


def test_publishing_after_every_commit_writes_the_bytes_of_one_sync_at_the_end(
    tmp_path: Path,
) -> None:
    """The publisher a process keeps across commits (its snapshots carried from one sync to
    the next) writes what a fresh publisher writes for the whole timeline at once."""
    root = tmp_path / "t"
    table = Table.create(
        str(root),
        name="t",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        buckets=2,
        publish_delta=True,
    )
    for i in range(COMMITS):
        table.write(rows(*[(k, "eu" if k % 3 else "us", i, f"v{i}") for k in range(i, i + 5)]))
        if i == COMMITS // 2:
            table.write(rows((i, "eu" if i % 3 else "us", 0, None)), "delete")
    clustering = table.schedule_clustering(sort_by=["ts"])
    assert clustering is not None
    table.run_table_service(clustering)
    assert log_versions(root) == list(range(len(table.state().completed()) + 1))
    assert {v: _version_bytes(root, v) for v in log_versions(root)} == clean_run_bytes(
        root, tmp_path
    )


def test_a_clean_with_orphans_never_takes_the_delta_log_for_garbage(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table = unpublished_table(root)
    publisher(root).sync()
    log = {p.name: p.read_bytes() for p in (root / "_delta_log").iterdir()}
    assert len(log) > COMMITS
    ten_days_later = time.time() + 10 * 86400
    result = table.clean(
        CleanPolicy(commits_retained=1, retention_window_s=0),
        delete_orphans=True,
        wall_clock=lambda: ten_days_later,
    )
    assert result.files_deleted > 0
    assert not any(f.path.startswith("_delta_log/") for f in (*result.files, *result.orphans))
    kept = {p.name: p.read_bytes() for p in (root / "_delta_log").iterdir()}
    assert {k: v for k, v in kept.items() if k in log} == {k: log[k] for k in kept if k in log}
    # Only the log's retention (``test_delta_retention``) took what is before the checkpoint.
    assert {k for k in log if k >= f"{10:020d}"} <= kept.keys()
    assert_latest_matches(table, root)
