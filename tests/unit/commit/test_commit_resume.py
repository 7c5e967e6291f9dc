"""A job commit interrupted anywhere, then run again from scratch by a fresh committer (as
another process would), ends with the same files: none lost, none twice, none of a loser."""

from __future__ import annotations

import json

import pytest
from _commit_helpers import (
    CrashAtStage,
    Table,
    crash_at,
    expected,
    job_files,
    run_task,
)

from lakewarden.commit import (
    CommitterOptions,
    ConflictingCommitRequestError,
    JobCommitResult,
    ManifestCommitter,
    RetryableStageFailedError,
    StageFailedError,
    TaskAttemptId,
)
from lakewarden.storage.faults import FaultyStorage, InjectedFaultError
from lakewarden.testing import SimulatedCrash

JOB_STAGES = [
    "job_stage_load_manifests",
    "job_stage_validate_manifests",
    "job_stage_create_target_dirs",
    "place",  # job_stage_rename_files (local) or job_stage_complete_uploads (S3)
    "job_stage_save_success_marker",
    "job_stage_cleanup",
]


def _place(table: Table) -> str:
    return "job_stage_complete_uploads" if table.is_s3 else "job_stage_rename_files"


def _prepare(table: Table) -> tuple[str, list[TaskAttemptId], dict[str, bytes]]:
    """A set-up job: 5 tasks x 4 files committed, plus a losing attempt of task 0."""
    committer = table.committer()
    committer.setup_job()
    files = job_files(tasks=5, per_task=4)
    accepted = [run_task(committer, t, 1, f).attempt_id for t, f in files.items()]
    run_task(committer, 0, 0, {"p=0/loser.parquet": b"the losing attempt of task 0"})
    return committer.job_id, accepted, expected(files)


def _assert_final(table: Table, result: JobCommitResult, want: dict[str, bytes]) -> None:
    assert table.data_files() == want
    keys = [f.key for f in result.files]
    assert len(keys) == len(set(keys)) and set(keys) == set(want)
    assert {f.key: f.size for f in result.files} == {k: len(v) for k, v in want.items()}
    assert table.pending_uploads() == []
    assert [k for k in table.all_keys() if k.startswith("_temporary/")] == []
    summary = json.loads(table.storage.read(result.summary_key))
    assert summary["success"] is True and summary["state"] == "COMMITTED"


@pytest.mark.parametrize("event", ["start", "end"])
@pytest.mark.parametrize("stage", JOB_STAGES)
def test_crash_at_each_stage_then_resume(table: Table, stage: str, event: str) -> None:
    stage = _place(table) if stage == "place" else stage
    job_id, accepted, want = _prepare(table)
    crashing = table.committer(job_id, stage_hook=CrashAtStage(stage, event))
    with pytest.raises(SimulatedCrash):
        crashing.commit_job(accepted)
    resumed = table.committer(job_id).commit_job(accepted)
    _assert_final(table, resumed, want)
    committed_before_crash = stage == "job_stage_cleanup" or (
        stage == "job_stage_save_success_marker" and event == "end"
    )
    assert resumed.recorded == committed_before_crash
    validated = JOB_STAGES.index("job_stage_validate_manifests")
    position = JOB_STAGES.index("place" if stage == _place(table) else stage)
    plan_recorded = position > validated or (position == validated and event == "end")
    assert resumed.resumed == plan_recorded


@pytest.mark.parametrize("nth", [1, 7, 20])
def test_crash_in_the_middle_of_placing_files_then_resume(table: Table, nth: int) -> None:
    job_id, accepted, want = _prepare(table)
    op = "complete_multipart" if table.is_s3 else "rename"
    crashing = table.committer(job_id, storage=crash_at(table.storage, op, nth), options=_serial())
    with pytest.raises(SimulatedCrash):
        crashing.commit_job(accepted)  # one worker: exactly nth - 1 files placed before
    placed_before = len(table.data_files())
    assert placed_before == nth - 1
    resumed = table.committer(job_id).commit_job(accepted)
    _assert_final(table, resumed, want)
    assert resumed.resumed and resumed.already_done == nth - 1
    assert resumed.placed == len(want) - (nth - 1)


def test_store_fault_fails_retryably_records_the_stage_and_resumes(table: Table) -> None:
    job_id, accepted, want = _prepare(table)
    faulty = FaultyStorage(table.storage)
    op = "complete_multipart" if table.is_s3 else "rename"
    faulty.fail(op, nth=5)
    committer = ManifestCommitter(faulty, job_id, options=_serial())
    with pytest.raises(RetryableStageFailedError) as info:
        committer.commit_job(accepted)
    assert info.value.stage == _place(table)
    assert isinstance(info.value.__cause__, InjectedFaultError)
    assert committer.statistics.counter(f"{_place(table)}.failures") == 1
    summary = committer.summary()
    assert summary is not None and not summary.success and summary.stage == _place(table)
    assert len(table.data_files()) == 4  # stopped at the first failure
    _assert_final(table, table.committer(job_id).commit_job(accepted), want)


def test_lost_reply_of_a_placement_is_recognised_on_resume(table: Table) -> None:
    job_id, accepted, want = _prepare(table)
    faulty = FaultyStorage(table.storage)
    op = "complete_multipart" if table.is_s3 else "rename"
    faulty.lose_reply(op, nth=3)  # the third file lands, then its reply is lost
    with pytest.raises(StageFailedError):
        ManifestCommitter(faulty, job_id, options=_serial()).commit_job(accepted)
    assert len(table.data_files()) == 3
    result = table.committer(job_id).commit_job(accepted)
    _assert_final(table, result, want)
    assert result.already_done == 3


def test_resume_with_other_accepted_attempts_is_refused(table: Table) -> None:
    job_id, accepted, want = _prepare(table)
    with pytest.raises(SimulatedCrash):
        op = "complete_multipart" if table.is_s3 else "rename"
        crashing = table.committer(
            job_id, storage=crash_at(table.storage, op, 2), options=_serial()
        )
        crashing.commit_job(accepted)
    loser = TaskAttemptId.of(job_id, 0, 0)
    other_set = [loser if a.task_id.task == 0 else a for a in accepted]
    with pytest.raises(StageFailedError) as info:
        table.committer(job_id).commit_job(other_set)
    assert isinstance(info.value.__cause__, ConflictingCommitRequestError)
    assert "p=0/loser.parquet" not in table.data_files()
    _assert_final(table, table.committer(job_id).commit_job(accepted), want)


def test_a_committed_job_answers_a_duplicate_request_with_its_recorded_result(
    table: Table,
) -> None:
    job_id, accepted, want = _prepare(table)
    first = table.committer(job_id).commit_job(accepted)
    again = table.committer(job_id).commit_job(accepted)
    assert again.recorded and set(again.files) == set(first.files)
    _assert_final(table, again, want)
    with pytest.raises(ConflictingCommitRequestError):
        table.committer(job_id).commit_job(accepted[1:])


def _serial() -> CommitterOptions:
    """One worker, one chunk per manifest: files are placed in a predictable order."""
    return CommitterOptions(threads=1, batch_size=1000)
