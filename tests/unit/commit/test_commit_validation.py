"""Validation before any rename: every violation fails the job, names the path and the stage,
records a failure summary, moves the failure counter, and renames nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from _commit_helpers import Table, forge_manifest, run_task

from lakewarden.commit import (
    CommitterOptions,
    DestinationExistsError,
    DuplicateDestinationError,
    MalformedManifestError,
    ManifestCommitter,
    MissingManifestError,
    NonRetryableStageFailedError,
    PathOutsideTableError,
    SizeMismatchError,
    SourceOutsideAttemptError,
    TaskAttempt,
)
from lakewarden.commit.layout import attempt_file_name


def _with_extra_entry(
    table: Table, committer: ManifestCommitter, attempt: TaskAttempt, extra: dict[str, Any]
) -> None:
    """Rewrite ``attempt``'s saved manifest with one more (hand-made) entry."""
    key = committer.layout.manifest_key(attempt.attempt_id)
    doc = json.loads(table.storage.read(key))
    template = doc["files"][0]
    source = extra["d"] if table.is_s3 else template["s"]
    entry = {"s": source, "z": template["z"], "e": None, **extra}
    if table.is_s3 and "u" not in extra:
        upload = dict(template["u"])
        upload["destinationKey"] = upload["destinationKey"][: -len(template["d"])] + extra["d"]
        entry["u"] = upload
    doc["files"].append(entry)
    table.storage.write(key, json.dumps(doc).encode())


def _expect_refused(
    table: Table,
    committer: ManifestCommitter,
    accepted: list[TaskAttempt],
    error: type[Exception],
    stage: str,
    path_part: str,
) -> NonRetryableStageFailedError:
    before = table.data_files()
    with pytest.raises(NonRetryableStageFailedError) as info:
        committer.commit_job([a.attempt_id for a in accepted])
    err = info.value
    assert isinstance(err.__cause__, error), err.__cause__
    assert err.stage == stage
    assert err.path is not None and path_part in err.path
    assert path_part in str(err) or repr(path_part)[1:-1] in str(err)
    assert committer.statistics.counter(f"{stage}.failures") == 1
    assert table.data_files() == before  # nothing renamed, nothing completed
    summary = json.loads(table.storage.read(committer.layout.summary_key))
    assert summary["success"] is False and summary["state"] == "FAILED"
    assert summary["stage"] == stage
    assert error.__name__ in summary["diagnostics"]["exception"]
    assert "Traceback" in summary["diagnostics"]["stacktrace"]
    assert summary["committedFiles"] == {}
    return err


@pytest.mark.parametrize(
    "bad",
    [
        "../escape.parquet",
        "p=0/../../escape.parquet",
        "/etc/passwd",
        "p=0//x.parquet",
        "p=0\\..\\..\\x.parquet",
        "p=0/\ud800.parquet",  # not UTF-8: hypothesis found a lone surrogate key
        "_temporary/x.parquet",
        ".lakewarden/timeline/00000000000000000099.json",
        ".lakewarden/jobs/other/_SUCCESS",
    ],
)
def test_destination_escaping_the_table_is_refused_and_nothing_renamed(
    table: Table, bad: str
) -> None:
    committer = table.committer()
    committer.setup_job()
    good = run_task(committer, 0, 0, {"p=0/good.parquet": b"good data"})
    _with_extra_entry(table, committer, good, {"d": bad})
    _expect_refused(
        table, committer, [good], PathOutsideTableError, "job_stage_load_manifests", bad
    )
    committer.abort_job()
    assert table.data_files() == {} and table.pending_uploads() == []


def test_upload_to_another_key_than_its_destination_is_refused(s3_table: Table) -> None:
    table = s3_table
    committer = table.committer()
    committer.setup_job()
    good = run_task(committer, 0, 0, {"p=0/good.parquet": b"good"})
    key = committer.layout.manifest_key(good.attempt_id)
    doc = json.loads(table.storage.read(key))
    doc["files"][0]["d"] = doc["files"][0]["s"] = "p=0/renamed.parquet"  # upload still to good
    table.storage.write(key, json.dumps(doc).encode())
    _expect_refused(
        table, committer, [good], PathOutsideTableError, "job_stage_load_manifests", "renamed"
    )


def test_source_outside_the_attempt_directory_is_refused(local_table: Table) -> None:
    table = local_table
    table.storage.write("p=0/committed-earlier.parquet", b"visible data of another commit")
    committer = table.committer()
    committer.setup_job()
    other = run_task(committer, 1, 0, {"p=1/other.parquet": b"other attempt's"})
    good = run_task(committer, 0, 0, {"p=0/good.parquet": b"good data"})
    for src in (
        "p=0/committed-earlier.parquet",  # would move a visible file of the table
        committer.layout.task_attempt_dir(other.attempt_id) + "p=1/other.parquet",
        committer.layout.task_attempt_dir(good.attempt_id) + "../x/p=0/y.parquet",
    ):
        _with_extra_entry(table, committer, good, {"s": src, "d": "p=0/stolen.parquet"})
        fresh = table.committer(committer.job_id)
        with pytest.raises(NonRetryableStageFailedError) as info:
            fresh.commit_job([good.attempt_id, other.attempt_id])
        assert isinstance(info.value.__cause__, SourceOutsideAttemptError)
        assert info.value.path == src
        run_task_manifest_reset(table, committer, good)
    assert table.storage.read("p=0/committed-earlier.parquet") == b"visible data of another commit"
    assert set(table.data_files()) == {"p=0/committed-earlier.parquet"}


def run_task_manifest_reset(
    table: Table, committer: ManifestCommitter, attempt: TaskAttempt
) -> None:
    """Drop the forged entry again (keep the first, real one)."""
    key = committer.layout.manifest_key(attempt.attempt_id)
    doc = json.loads(table.storage.read(key))
    doc["files"] = doc["files"][:1]
    table.storage.write(key, json.dumps(doc).encode())


def test_size_mismatch_is_refused(local_table: Table) -> None:
    table = local_table
    committer = table.committer()
    committer.setup_job()
    good = run_task(committer, 0, 0, {"p=0/a.parquet": b"12345", "p=0/b.parquet": b"xyz"})
    key = committer.layout.manifest_key(good.attempt_id)
    doc = json.loads(table.storage.read(key))
    doc["files"][1]["z"] += 1
    table.storage.write(key, json.dumps(doc).encode())
    _expect_refused(
        table, committer, [good], SizeMismatchError, "job_stage_validate_manifests", "parquet"
    )


def test_destination_named_by_two_manifests_is_refused(table: Table) -> None:
    committer = table.committer()
    committer.setup_job()
    a = run_task(committer, 0, 0, {"p=0/same.parquet": b"from task 0", "p=0/a.parquet": b"a"})
    b = run_task(committer, 1, 0, {"p=0/same.parquet": b"from task 1", "p=0/b.parquet": b"b"})
    err = _expect_refused(
        table,
        committer,
        [a, b],
        DuplicateDestinationError,
        "job_stage_validate_manifests",
        "p=0/same.parquet",
    )
    assert str(a.attempt_id) in str(err) and str(b.attempt_id) in str(err)
    committer.abort_job()
    assert table.data_files() == {} and table.pending_uploads() == []


def test_destination_named_twice_in_one_manifest_is_refused(table: Table) -> None:
    committer = table.committer()
    committer.setup_job()
    good = run_task(committer, 0, 0, {"p=0/dup.parquet": b"data"})
    _with_extra_entry(table, committer, good, {"d": "p=0/dup.parquet"})
    _expect_refused(
        table,
        committer,
        [good],
        DuplicateDestinationError,
        "job_stage_validate_manifests",
        "p=0/dup.parquet",
    )


def test_occupied_destination_is_refused_before_anything_is_placed(table: Table) -> None:
    """With destination checks (the default in upload mode, an option in rename mode)."""
    table.storage.write("p=0/taken.parquet", b"another commit's file")
    committer = table.committer(options=CommitterOptions(check_destinations=True))
    committer.setup_job()
    good = run_task(committer, 0, 0, {"p=0/free.parquet": b"new", "p=0/taken.parquet": b"mine"})
    _expect_refused(
        table,
        committer,
        [good],
        DestinationExistsError,
        "job_stage_validate_manifests",
        "p=0/taken.parquet",
    )
    assert table.storage.read("p=0/taken.parquet") == b"another commit's file"


def test_occupied_destination_without_checks_is_never_replaced(local_table: Table) -> None:
    """Rename mode by default skips the up-front check: the no-replace rename refuses the
    collision, the job fails naming it, and abort rolls back only what the job renamed."""
    table = local_table
    table.storage.write("p=0/m-taken.parquet", b"another commit's file")
    committer = table.committer(options=CommitterOptions(threads=1))
    committer.setup_job()
    files = {"p=0/a-free.parquet": b"new", "p=0/m-taken.parquet": b"mine", "p=0/z.parquet": b"z"}
    good = run_task(committer, 0, 0, files)
    with pytest.raises(NonRetryableStageFailedError) as info:
        committer.commit_job([good.attempt_id])
    assert info.value.stage == "job_stage_rename_files"
    assert isinstance(info.value.__cause__, DestinationExistsError)
    assert info.value.path == "p=0/m-taken.parquet"
    assert table.storage.read("p=0/m-taken.parquet") == b"another commit's file"
    assert "p=0/z.parquet" not in table.data_files()  # stopped at the first failure
    result = table.committer(committer.job_id).abort_job()
    assert result.rolled_back == 1
    assert table.data_files() == {"p=0/m-taken.parquet": b"another commit's file"}


def test_missing_and_malformed_manifests_are_refused(table: Table) -> None:
    committer = table.committer()
    committer.setup_job()
    never_committed = run_task(committer, 0, 0, {"a.parquet": b"a"}, commit=False)
    _expect_refused(
        table,
        committer,
        [never_committed],
        MissingManifestError,
        "job_stage_load_manifests",
        "-manifest.json",
    )
    for forged in ({"jobId": "someone-else"}, {"type": "other/1"}):
        attempt = committer.task_attempt(3, 0).attempt_id
        forge_manifest(table.storage, committer.layout, attempt, [])
        key = committer.layout.manifest_key(attempt)
        doc = json.loads(table.storage.read(key))
        doc.update(forged)
        table.storage.write(key, json.dumps(doc).encode())
        with pytest.raises(NonRetryableStageFailedError) as info:
            table.committer(committer.job_id).commit_job([attempt])
        assert isinstance(info.value.__cause__, MalformedManifestError)
    table.storage.write(key, b"{not json")
    with pytest.raises(NonRetryableStageFailedError, match="is not JSON"):
        table.committer(committer.job_id).commit_job([attempt])


# -- symbolic links (local filesystem) ----------------------------------------------------------


def _setup_one(table: Table) -> tuple[ManifestCommitter, TaskAttempt, Path]:
    committer = table.committer()
    committer.setup_job()
    attempt = run_task(committer, 0, 0, {"p=0/good.parquet": b"good"})
    root = Path(table.storage.local_path("x") or "").parent
    return committer, attempt, root


def test_destination_directory_symlinked_out_of_the_table_is_refused(
    local_table: Table, tmp_path: Path
) -> None:
    committer, attempt, root = _setup_one(local_table)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, root / "p=9")
    _with_extra_entry(
        local_table,
        committer,
        attempt,
        {"s": _src(committer, attempt, "p=9/x.parquet"), "d": "p=9/x.parquet"},
    )
    (root / _src(committer, attempt, "p=9/x.parquet")).parent.mkdir(parents=True, exist_ok=True)
    (root / _src(committer, attempt, "p=9/x.parquet")).write_bytes(b"good")
    _expect_refused(
        local_table,
        committer,
        [attempt],
        PathOutsideTableError,
        "job_stage_validate_manifests",
        "p=9",
    )
    assert list(outside.iterdir()) == []


def test_destination_directory_symlinked_into_the_metadata_is_refused(local_table: Table) -> None:
    committer, attempt, root = _setup_one(local_table)
    (root / ".lakewarden" / "timeline").mkdir(parents=True)
    os.symlink(root / ".lakewarden" / "timeline", root / "p=7")
    src = _src(committer, attempt, "p=7/00000000000000000001.json")
    (root / src).parent.mkdir(parents=True, exist_ok=True)
    (root / src).write_bytes(b"good")
    _with_extra_entry(
        local_table, committer, attempt, {"s": src, "d": "p=7/00000000000000000001.json"}
    )
    _expect_refused(
        local_table,
        committer,
        [attempt],
        PathOutsideTableError,
        "job_stage_validate_manifests",
        "p=7",
    )
    assert list((root / ".lakewarden" / "timeline").iterdir()) == []


def test_source_symlink_to_a_file_outside_is_refused(local_table: Table, tmp_path: Path) -> None:
    committer, attempt, root = _setup_one(local_table)
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"good")  # same size as the manifest will claim
    src = _src(committer, attempt, "p=0/link.parquet")
    os.symlink(secret, root / src)
    _with_extra_entry(local_table, committer, attempt, {"s": src, "d": "p=0/link.parquet"})
    _expect_refused(
        local_table,
        committer,
        [attempt],
        SourceOutsideAttemptError,
        "job_stage_validate_manifests",
        "link.parquet",
    )
    assert secret.read_bytes() == b"good"


def test_source_directory_symlinked_outside_is_refused(local_table: Table, tmp_path: Path) -> None:
    committer, attempt, root = _setup_one(local_table)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "f.parquet").write_bytes(b"good")
    attempt_dir = root / committer.layout.task_attempt_dir(attempt.attempt_id)
    os.symlink(elsewhere, attempt_dir / "p=5")
    nested = committer.layout.task_attempt_dir(attempt.attempt_id) + "p=5/f.parquet"
    _with_extra_entry(local_table, committer, attempt, {"s": nested, "d": "p=5/f.parquet"})
    _expect_refused(
        local_table,
        committer,
        [attempt],
        SourceOutsideAttemptError,
        "job_stage_validate_manifests",
        "p=5",
    )
    assert (elsewhere / "f.parquet").read_bytes() == b"good"


def _src(committer: ManifestCommitter, attempt: TaskAttempt, dest: str) -> str:
    return committer.layout.task_attempt_dir(attempt.attempt_id) + attempt_file_name(dest)
