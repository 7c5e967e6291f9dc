"""What a small local write fsyncs, and in which order.

The commit is the completed timeline entry's durability: every file the completed instant
names, and the directories holding their names, must be durable before that entry is created;
the job's staging records (``job.json``, the task manifest, the commit plan) and staging
directories are never synced (``CommitStore.write_staging``). The count is pinned per kind so
a regression shows which kind of fsync came back.
"""

from __future__ import annotations

import os
import stat
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakewarden.api.table import Table
from lakewarden.commit import _localfs
from lakewarden.commit._store import CommitStore
from lakewarden.storage import AlreadyExistsError
from lakewarden.storage.local import LocalStorage

# The fsyncs are told apart by the paths their descriptors have (``/proc/self/fd``).
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/fd")

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("ts", pa.int64())])
REGIONS = ("eu", "us")
BUCKETS = 4


def _rows(start: int, count: int) -> pa.Table:
    ids = list(range(start, start + count))
    regions = [REGIONS[i % 2] for i in ids]
    return pa.table({"id": ids, "region": regions, "ts": ids}, schema=SCHEMA)


class SyncLog:
    """Every fsync (the inode and the path it had) and every link into the timeline, in
    order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, str]] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        fsync, link = os.fsync, os.link

        def counted_fsync(fd: Any) -> None:
            number = fd if isinstance(fd, int) else fd.fileno()
            st = os.fstat(number)
            path = os.readlink(f"/proc/self/fd/{number}")
            kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
            self.events.append((f"fsync-{kind}", st.st_ino, path))
            fsync(fd)

        def recorded_link(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
            link(src, dst, *args, **kwargs)
            self.events.append(("link", os.stat(dst).st_ino, os.fspath(dst)))

        monkeypatch.setattr(os, "fsync", counted_fsync)
        monkeypatch.setattr(os, "link", recorded_link)

    def kinds(self, root: Path) -> Counter[str]:
        """The fsyncs by what they protect."""
        counts: Counter[str] = Counter()
        for event, _, path in self.events:
            if not event.startswith("fsync"):
                continue
            rel = os.path.relpath(path, root)
            if rel.startswith(".lakewarden/timeline"):
                counts["timeline entry" if event == "fsync-file" else "timeline dir"] += 1
            elif rel.startswith(".lakewarden/jobs/"):
                counts["_SUCCESS" if event == "fsync-file" else "_SUCCESS dir"] += 1
            elif event == "fsync-file" and rel.startswith("_temporary/"):
                counts["data file"] += 1
            elif event == "fsync-dir" and not rel.startswith(("_temporary", ".lakewarden")):
                counts["destination dir"] += 1
            else:
                counts[f"other: {rel}"] += 1
        return counts


@pytest.fixture()
def table(tmp_path: Path) -> Table:
    table = Table.create(
        str(tmp_path / "t"),
        name="t",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        ordering_field="ts",
        buckets=BUCKETS,
    )
    table.write(_rows(0, 200), "insert")  # every bucket of both partitions has a file
    return table


def test_a_small_write_fsyncs_only_what_the_commit_needs(
    table: Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = SyncLog()
    log.install(monkeypatch)
    table.write(_rows(200, 200), "insert")
    files = len(REGIONS) * BUCKETS
    assert log.kinds(tmp_path / "t") == {
        "timeline entry": 3,  # requested, inflight, completed: each durable before its link
        "timeline dir": 3,  # each entry's name
        "data file": files,  # each new base file, before the task commit
        "destination dir": 1 + len(REGIONS),  # the table root and each partition directory
        "_SUCCESS": 1,
        "_SUCCESS dir": 1,
    }


def test_data_and_directories_are_durable_before_the_completed_entry(
    table: Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "t"
    log = SyncLog()
    log.install(monkeypatch)
    result = table.write(_rows(200, 200), "insert")

    synced: dict[int, int] = {}  # inode -> its first fsync
    for i, (event, ino, _) in enumerate(log.events):
        if event.startswith("fsync"):
            synced.setdefault(ino, i)
    timeline = sorted((root / ".lakewarden" / "timeline").glob("*.json"))
    completed = timeline[-1]
    assert result.instant in completed.read_text()
    entry_ino = completed.stat().st_ino
    # Found by its name: an inode freed earlier in the write (a staging record the job commit
    # deleted) can come back as the entry's, so an earlier link may show the same inode.
    linked = next(
        i
        for i, (event, _, path) in enumerate(log.events)
        if event == "link" and path == os.fspath(completed)
    )
    assert synced[entry_ino] < linked  # the entry's content is durable before its name
    for stat_ in result.stats.write_stats:  # every file it names, before the entry exists
        path = root / stat_.path
        assert synced.get(path.stat().st_ino, linked) < linked, stat_.path
        assert synced.get(path.parent.stat().st_ino, linked) < linked, path.parent
    timeline_dir = (root / ".lakewarden" / "timeline").stat().st_ino
    after = [
        i for i, (e, ino, _) in enumerate(log.events) if e == "fsync-dir" and ino == timeline_dir
    ]
    assert after and after[-1] > linked  # the completed entry's name is made durable: the commit


def test_staging_records_are_written_whole_without_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CommitStore(LocalStorage(tmp_path))
    log = SyncLog()
    log.install(monkeypatch)
    store.write_staging("_temporary/manifest_j/00/job.json", b"{}")
    with pytest.raises(AlreadyExistsError):
        store.write_staging("_temporary/manifest_j/00/job.json", b"{other}")
    assert (tmp_path / "_temporary/manifest_j/00/job.json").read_bytes() == b"{}"
    assert os.listdir(tmp_path / "_temporary/manifest_j/00") == ["job.json"]  # no temporaries
    assert not [e for e in log.events if e[0].startswith("fsync")]
    store.make_dirs("_temporary/manifest_j/00/tasks", staging=True)
    store.make_dirs("region=eu/day=1")
    # The parents of a destination directory (its own name is synced with the renames).
    assert store.dirty_dirs() == [store.path(""), store.path("region=eu")]
    assert _localfs.regular_file_size(str(tmp_path / "_temporary/manifest_j/00/job.json")) == 2
