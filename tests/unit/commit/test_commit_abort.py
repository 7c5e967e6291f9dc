"""Job abort and task abort: afterwards no file of the job and no pending upload remains."""

from __future__ import annotations

import gc
import json
import shutil
import sys
from pathlib import Path

import pytest
from _commit_helpers import Table, crash_at, job_files, run_task

from lakewarden.commit import (
    CommitterOptions,
    JobAbortedError,
    JobAlreadyCommittedError,
    ManifestCommitter,
    StageFailedError,
)
from lakewarden.storage.local import LocalStorage
from lakewarden.testing import SimulatedCrash


def _work_area(table: Table) -> list[str]:
    return [k for k in table.all_keys() if k.startswith("_temporary/")]


def _crash_after_create(table: Table, committer: ManifestCommitter, task: int, key: str) -> None:
    """An attempt that dies right after creating its upload, before recording the id (S3), or
    in the middle of writing its file (local)."""
    crashing = crash_at(table.storage, "write", 2)
    attempt = table.committer(committer.job_id, storage=crashing).task_attempt(task, 0)
    attempt.setup()
    if table.is_s3:
        with pytest.raises(SimulatedCrash):
            attempt.create_file(key)
    else:
        half_written = attempt.create_file(key)
        half_written.write(b"half")
        del half_written  # the process dies: the file is never closed


def test_job_abort_leaves_no_files_and_no_pending_uploads(table: Table) -> None:
    committer = table.committer()
    committer.setup_job()
    files = job_files(tasks=3, per_task=3)
    for task, task_files in files.items():
        run_task(committer, task, 0, task_files, commit=task != 2)  # task 2 never commits
    _crash_after_create(table, committer, 3, "p=1/crashed.parquet")
    assert table.pending_uploads() != [] or not table.is_s3
    result = committer.abort_job(reason="driver aborted the write")
    assert table.data_files() == {}
    assert table.pending_uploads() == []
    assert _work_area(table) == []
    assert result.rolled_back == 0 and result.unresolved_uploads == 0
    summary = json.loads(table.storage.read(committer.layout.summary_key))
    assert summary["state"] == "ABORTED" and summary["success"] is False
    assert summary["diagnostics"]["reason"] == "driver aborted the write"
    with pytest.raises(JobAbortedError):
        table.committer(committer.job_id).commit_job([])


def test_abort_after_an_interrupted_commit_rolls_back_what_was_placed(table: Table) -> None:
    committer = table.committer()
    committer.setup_job()
    files = job_files(tasks=4, per_task=3)
    accepted = [run_task(committer, t, 0, f).attempt_id for t, f in files.items()]
    op = "complete_multipart" if table.is_s3 else "rename"
    crashing = table.committer(
        committer.job_id,
        storage=crash_at(table.storage, op, 6),
        options=CommitterOptions(threads=1),
    )
    with pytest.raises(SimulatedCrash):
        crashing.commit_job(accepted)
    assert len(table.data_files()) == 5
    result = table.committer(committer.job_id).abort_job()
    assert result.rolled_back == 5
    assert table.data_files() == {} and table.pending_uploads() == [] and _work_area(table) == []
    with pytest.raises(JobAbortedError):
        table.committer(committer.job_id).commit_job(accepted)


def test_abort_never_deletes_a_file_it_did_not_place(table: Table) -> None:
    table.storage.write("p=0/part-000-000-a0.parquet", b"an earlier commit's file")
    committer = table.committer()
    committer.setup_job()
    files = job_files(tasks=1, per_task=2)
    accepted = [run_task(committer, t, 0, f).attempt_id for t, f in files.items()]
    with pytest.raises(StageFailedError):  # the destination is taken: validation refuses
        committer.commit_job(accepted)
    table.committer(committer.job_id).abort_job()
    assert table.data_files() == {"p=0/part-000-000-a0.parquet": b"an earlier commit's file"}
    assert table.pending_uploads() == []


def test_abort_of_a_committed_job_needs_force(table: Table) -> None:
    committer = table.committer()
    committer.setup_job()
    attempt = run_task(committer, 0, 0, {"p=0/a.parquet": b"committed"})
    committer.commit_job([attempt.attempt_id])
    with pytest.raises(StageFailedError) as info:
        committer.abort_job()
    assert isinstance(info.value.__cause__, JobAlreadyCommittedError)
    assert table.data_files() == {"p=0/a.parquet": b"committed"}
    result = committer.abort_job(force=True, reason="instant rolled back after a conflict")
    assert result.rolled_back == 1
    assert table.data_files() == {}


def test_task_abort_discards_the_attempt(table: Table) -> None:
    committer = table.committer()
    committer.setup_job()
    keep = run_task(committer, 0, 0, {"p=0/keep.parquet": b"keep"})
    drop = run_task(committer, 1, 0, {"p=1/drop.parquet": b"drop", "p=1/drop2.parquet": b"x"})
    result = drop.abort()
    assert result.unresolved_uploads == 0
    assert [k for k in _work_area(table) if str(drop.attempt_id) in k] == []
    assert all("drop" not in key for key in table.pending_uploads())
    committer.commit_job([keep.attempt_id])
    assert table.data_files() == {"p=0/keep.parquet": b"keep"}
    assert table.pending_uploads() == []


def test_upload_at_the_table_root_without_a_recorded_id_is_reported_unresolved(
    s3_table: Table,
) -> None:
    """The documented limit (lakewarden.commit.uploads): a key with no directory cannot be
    listed with a '/'-terminated prefix, so an upload whose id was never recorded is left to
    the bucket's lifecycle rule, and abort says so."""
    table = s3_table
    committer = table.committer()
    committer.setup_job()
    _crash_after_create(table, committer, 0, "root-level.parquet")
    result = committer.abort_job()
    assert result.unresolved_uploads == 1
    assert table.pending_uploads() == ["root-level.parquet"]  # the fixture's cleanup aborts it


def test_a_local_file_that_could_not_be_created_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The directory of an attempt's file gone before the file is opened (a clean removing a
    fenced executor's work area): ``create_file`` raises the OS error, and the half-made file
    object, once collected, raises nothing. It raised AttributeError from ``__del__``, which
    pytest reports in whichever test the garbage collector happens to run in."""
    committer = ManifestCommitter(LocalStorage(str(tmp_path)), "job-gone")
    committer.setup_job()
    attempt = committer.task_attempt(0)
    attempt.setup()
    shutil.rmtree(attempt.store.path(attempt.layout.task_attempt_dir(attempt.attempt_id)))
    monkeypatch.setattr(attempt.store, "make_dirs", lambda key, staging=False: None)
    unraisable: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    with pytest.raises(FileNotFoundError):
        attempt.create_file("p=0/gone.parquet")
    gc.collect()
    assert unraisable == []
