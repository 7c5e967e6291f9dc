"""``CommitStore``: the committer picks its path from the storage's capabilities, and every
store call of a job commit is metered through its one ``MeteredStorage``."""

from __future__ import annotations

import pytest
from _commit_helpers import Table, job_files, run_task

from lakewarden.commit import CommitterOptions
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
