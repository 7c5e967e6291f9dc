"""The protocol end to end on each backend: what becomes visible, and what never does."""

from __future__ import annotations

import json

import pytest
from _commit_helpers import Table, expected, job_files, run_task

from lakewarden.commit import (
    CommitterOptions,
    ConflictingCommitRequestError,
    JobIdInUseError,
    JobNotActiveError,
    PathOutsideTableError,
    StageFailedError,
    TaskCommitError,
)
from lakewarden.commit.manifest import MANIFEST_TYPE
from lakewarden.commit.success import SUCCESS_NAME


def test_commit_makes_exactly_the_accepted_files_visible(table: Table) -> None:
    committer = table.committer()
    committer.setup_job()
    files = job_files(tasks=4, per_task=3)
    accepted = [run_task(committer, t, 0, f).attempt_id for t, f in files.items()]
    assert table.data_files() == {}  # nothing visible before the job commit
    result = committer.commit_job(accepted)
    assert table.data_files() == expected(files)
    assert {(f.key, f.size) for f in result.files} == {
        (k, len(v)) for k, v in expected(files).items()
    }
    assert result.placed == 12 and result.already_done == 0 and not result.resumed
    assert table.pending_uploads() == []
    # cleanup removed the work area; the summary stays
    assert [k for k in table.all_keys() if k.startswith("_temporary/")] == []
    assert result.summary_key in table.all_keys()


def test_only_the_accepted_attempt_of_a_task_appears(table: Table) -> None:
    committer = table.committer()
    committer.setup_job()
    loser = run_task(committer, 0, 0, {"p=0/loser.parquet": b"first attempt"})
    winner = run_task(committer, 0, 1, {"p=0/winner.parquet": b"second attempt"})
    other = run_task(committer, 1, 0, {"p=1/other.parquet": b"task 1"})
    result = committer.commit_job([winner.attempt_id, other.attempt_id])
    assert table.data_files() == {
        "p=0/winner.parquet": b"second attempt",
        "p=1/other.parquet": b"task 1",
    }
    assert {f.attempt for f in result.files} == {str(winner.attempt_id), str(other.attempt_id)}
    assert str(loser.attempt_id) not in {f.attempt for f in result.files}
    assert table.pending_uploads() == []  # the loser's upload was aborted by the cleanup


def test_zombie_attempt_writing_after_the_job_committed_never_appears(table: Table) -> None:
    committer = table.committer()
    committer.setup_job()
    winner = run_task(committer, 0, 1, {"p=0/winner.parquet": b"accepted"})
    zombie = committer.task_attempt(0, 0)
    zombie.setup()
    zombie.write_file("p=0/zombie-early.parquet", b"written before the job commit")
    committer.commit_job([winner.attempt_id])
    # The zombie keeps going: more files, then a task commit.
    zombie.write_file("p=0/zombie-late.parquet", b"written after the job commit")
    with pytest.raises(StageFailedError) as info:
        zombie.commit()
    assert isinstance(info.value.__cause__, JobNotActiveError)
    assert info.value.stage == "task_stage_commit"
    # A rerun of the job commit (a redelivered request) answers from the summary.
    again = table.committer(committer.job_id).commit_job([winner.attempt_id])
    assert again.recorded
    assert table.data_files() == {"p=0/winner.parquet": b"accepted"}
    # A fresh attempt of the finished job is refused at setup.
    with pytest.raises(StageFailedError) as setup_info:
        committer.task_attempt(0, 2).setup()
    assert isinstance(setup_info.value.__cause__, JobNotActiveError)


def test_manifest_uses_hadoop_task_manifest_fields(table: Table) -> None:
    committer = table.committer()
    committer.setup_job()
    attempt = run_task(committer, 7, 2, {"p=1/a.parquet": b"abc", "b.parquet": b"defg"})
    key = committer.layout.manifest_key(attempt.attempt_id)
    assert key.endswith(f"{attempt.attempt_id}-manifest.json")
    doc = json.loads(table.storage.read(key))
    assert list(doc) == [
        "type",
        "version",
        "jobId",
        "jobAttemptNumber",
        "taskID",
        "taskAttemptID",
        "taskAttemptDir",
        "files",
        "directories",
        "extraData",
        "iostatistics",
    ]
    assert doc["type"] == MANIFEST_TYPE and doc["version"] == 1
    assert doc["taskID"] == f"task_{committer.job_id}_000007"
    assert doc["taskAttemptID"] == f"attempt_{committer.job_id}_000007_2"
    by_dest = {f["d"]: f for f in doc["files"]}
    assert set(by_dest) == {"p=1/a.parquet", "b.parquet"}
    assert by_dest["p=1/a.parquet"]["z"] == 3 and "e" in by_dest["p=1/a.parquet"]
    assert doc["directories"] == [{"d": "p=1", "t": 0, "l": 1}]
    assert set(doc["iostatistics"]) == {
        "counters",
        "gauges",
        "minimums",
        "maximums",
        "meanstatistics",
    }
    if table.is_s3:
        upload = by_dest["b.parquet"]["u"]
        assert set(upload) == {"bucket", "destinationKey", "uploadId", "etags", "length"}
        assert upload["destinationKey"].endswith("/b.parquet") and upload["length"] == 4
        assert by_dest["b.parquet"]["s"] == "b.parquet"
    else:
        assert (
            by_dest["b.parquet"]["s"]
            == f"{committer.layout.task_attempt_dir(attempt.attempt_id)}b.parquet"
        )


def test_success_summary_on_success_has_hadoop_shape_and_every_file(table: Table) -> None:
    committer = table.committer()
    committer.setup_job()
    files = job_files(tasks=2, per_task=2)
    accepted = [run_task(committer, t, 0, f).attempt_id for t, f in files.items()]
    result = committer.commit_job(accepted, description="unit test")
    doc = json.loads(table.storage.read(f".lakewarden/jobs/{committer.job_id}/_SUCCESS"))
    assert doc["name"] == SUCCESS_NAME
    assert doc["success"] is True and doc["state"] == "COMMITTED" and doc["stage"] is None
    assert doc["jobId"] == committer.job_id and doc["description"] == "unit test"
    for field in ("timestamp", "date", "hostname", "committer", "metrics", "diagnostics"):
        assert field in doc
    assert sorted(doc["filenames"]) == sorted(expected(files))
    assert doc["metrics"] == {"files": 4, "bytes": sum(len(v) for v in expected(files).values())}
    counters = doc["iostatistics"]["counters"]
    assert counters["job_stage_load_manifests"] == 1
    assert counters["job_stage_validate_manifests"] == 1
    assert (
        counters["job_stage_rename_files" if not table.is_s3 else "job_stage_complete_uploads"] == 1
    )
    assert sorted(
        (key, size) for files_ in doc["committedFiles"].values() for key, size in files_
    ) == sorted((f.key, f.size) for f in result.files)


def test_repeated_task_commit_is_idempotent_but_a_different_manifest_is_refused(
    table: Table,
) -> None:
    committer = table.committer()
    committer.setup_job()
    attempt = run_task(committer, 0, 0, {"a.parquet": b"one"})
    assert attempt.commit().repeated  # same content: a retried commit whose reply was lost
    attempt.write_file("b.parquet", b"two")
    with pytest.raises(StageFailedError) as info:
        attempt.commit()
    assert isinstance(info.value.__cause__, TaskCommitError)
    assert "already committed a different manifest" in str(info.value)


def test_job_ids_are_unique(table: Table) -> None:
    committer = table.committer()
    committer.setup_job()
    committer.setup_job()  # the same setup again is idempotent
    with pytest.raises(StageFailedError) as info:
        table.committer(committer.job_id).setup_job()
    assert isinstance(info.value.__cause__, JobIdInUseError)
    assert info.value.stage == "job_stage_setup"


def test_commit_request_must_name_one_attempt_per_task_of_this_job(table: Table) -> None:
    committer = table.committer()
    committer.setup_job()
    a0 = run_task(committer, 0, 0, {"a.parquet": b"a"})
    a1 = run_task(committer, 0, 1, {"b.parquet": b"b"})
    with pytest.raises(ConflictingCommitRequestError, match="of one task are both accepted"):
        committer.commit_job([a0.attempt_id, a1.attempt_id])
    other = table.committer()
    with pytest.raises(ConflictingCommitRequestError, match="belongs to job"):
        committer.commit_job([other.task_attempt(0, 0).attempt_id])
    assert table.data_files() == {}


def test_unfinished_upload_or_invalid_key_is_refused_at_the_task(table: Table) -> None:
    committer = table.committer()
    committer.setup_job()
    attempt = committer.task_attempt(0, 0)
    attempt.setup()
    with pytest.raises(Exception, match="reserved area"):
        attempt.create_file("_temporary/evil.parquet")
    with pytest.raises(Exception, match="'..' segments"):
        attempt.create_file("../outside.parquet")
    with pytest.raises(PathOutsideTableError, match="not valid Unicode"):
        attempt.create_file("p=0/\ud800.parquet")
    if table.is_s3:
        still_open = attempt.create_file("open.parquet")
        still_open.write(b"never closed")
        with pytest.raises(StageFailedError) as info:
            attempt.commit()
        assert isinstance(info.value.__cause__, TaskCommitError)
        assert "unfinished upload" in str(info.value)
        attempt.abort()
        assert table.pending_uploads() == []
        del still_open


def test_large_file_goes_up_in_several_parts(s3_table: Table) -> None:
    table = s3_table
    committer = table.committer(options=CommitterOptions(part_size=5 * 1024 * 1024))
    committer.setup_job()
    data = bytes(range(256)) * (11 * 1024 * 1024 // 256 + 7)  # 3 parts, the last one short
    attempt = run_task(committer, 0, 0, {"big.bin": data})
    doc = json.loads(table.storage.read(committer.layout.manifest_key(attempt.attempt_id)))
    assert len(doc["files"][0]["u"]["etags"]) == 3
    committer.commit_job([attempt.attempt_id])
    assert table.storage.read("big.bin") == data


def test_a_file_abandoned_half_written_is_not_committed(table: Table) -> None:
    committer = table.committer()
    committer.setup_job()
    attempt = committer.task_attempt(0, 0)
    attempt.setup()
    attempt.write_file("p=0/done.parquet", b"complete")
    abandoned = attempt.create_file("p=0/abandoned.parquet")
    abandoned.write(b"half")
    del abandoned  # dropped without close (an exception path, a crash)
    if table.is_s3:
        with pytest.raises(StageFailedError, match="unfinished upload"):
            attempt.commit()
        attempt.abort()
        attempt = run_task(committer, 0, 1, {"p=0/done.parquet": b"complete"})
    else:
        attempt.commit()
    committer.commit_job([attempt.attempt_id])
    assert table.data_files() == {"p=0/done.parquet": b"complete"}
    assert table.pending_uploads() == []


def test_local_path_lets_a_writer_such_as_pyarrow_write_directly(local_table: Table) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    committer = local_table.committer()
    committer.setup_job()
    attempt = committer.task_attempt(0, 0)
    attempt.setup()
    pq.write_table(pa.table({"x": [1, 2, 3]}), attempt.local_path("p=1/data.parquet"))
    attempt.commit()
    result = committer.commit_job([attempt.attempt_id])
    assert [(f.key, f.attempt) for f in result.files] == [
        ("p=1/data.parquet", str(attempt.attempt_id))
    ]
    path = local_table.storage.local_path("p=1/data.parquet")
    assert path is not None and pq.read_table(path).column("x").to_pylist() == [1, 2, 3]
