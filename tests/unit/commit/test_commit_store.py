"""``CommitStore``: the committer picks its path from the storage's capabilities, and every
store call of a job commit is metered through its one ``MeteredStorage``."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from _commit_helpers import Table, job_files, run_task

from lakewarden.commit import CommitterOptions
from lakewarden.commit._localfs import rename_noreplace_errno
from lakewarden.storage.faults import FaultyStorage
from lakewarden.storage.metered import MeteredStorage


@pytest.mark.parametrize("wrapped", [False, True])
def test_local_job_commit_path_and_metering(local_table: Table, wrapped: bool) -> None:
    """A plain local store takes the fast path; wrapped (no direct file access) it goes
    through the contract. Either way the renames are counted once per file."""
    storage = FaultyStorage(local_table.storage) if wrapped else local_table.storage
    committer = local_table.committer(storage=storage, options=CommitterOptions(threads=2))
    assert committer.store.fast is not wrapped
    assert committer.store.can_rename and committer.store.local_root is not None
    assert isinstance(committer.store.metered, MeteredStorage)
    committer.setup_job()
    files = job_files(tasks=2, per_task=5)
    accepted = [run_task(committer, t, 0, f).attempt_id for t, f in files.items()]
    committer.commit_job(accepted)
    counters = committer.statistics.counters()
    assert counters["op_rename"] == 10
    assert counters["op_stat"] >= 10  # validation sized every file
    assert "op_rename.failures" not in counters
    if wrapped:
        assert isinstance(storage, FaultyStorage) and storage.calls("rename") == 10


def test_s3_job_commit_uses_uploads(s3_table: Table) -> None:
    committer = s3_table.committer()
    store = committer.store
    assert not store.fast and not store.can_rename and store.local_root is None
    committer.setup_job()
    files = job_files(tasks=1, per_task=3)
    accepted = [run_task(committer, t, 0, f).attempt_id for t, f in files.items()]
    committer.commit_job(accepted)
    assert committer.statistics.counter("op_complete_multipart") == 3


def test_fast_rename_finishes_a_rename_interrupted_between_link_and_unlink(
    tmp_path: Path,
) -> None:
    """``LocalStorage.rename`` (the path a wrapped store takes) renames by link + unlink; a
    process killed between the two leaves the file under both names. The fast path that
    resumes the job must finish that rename, not report the destination as foreign."""
    src, dst = tmp_path / "attempt.parquet", tmp_path / "final.parquet"
    src.write_bytes(b"rows")
    os.link(src, dst)  # killed here

    assert rename_noreplace_errno(bytes(src), bytes(dst)) == 0
    assert not src.exists() and dst.read_bytes() == b"rows"


def test_fast_rename_never_replaces_another_file(tmp_path: Path) -> None:
    src, dst = tmp_path / "attempt.parquet", tmp_path / "final.parquet"
    src.write_bytes(b"mine")
    dst.write_bytes(b"someone else's")

    assert rename_noreplace_errno(bytes(src), bytes(dst)) == errno.EEXIST
    assert src.read_bytes() == b"mine" and dst.read_bytes() == b"someone else's"
