"""The committer options a user sets (``Settings.committer``): output validation (size, and
etag where the store tags objects), cleanup off (the job directory kept for diagnosis), the
thread count; and that ``Table.write`` and the environment reach them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from _commit_helpers import Table, job_files, run_task

from lakewarden.api.table import Table as LakeTable
from lakewarden.commit import (
    CommitterOptions,
    NonRetryableStageFailedError,
    SizeMismatchError,
)
from lakewarden.commit.errors import EtagMismatchError
from lakewarden.commit.layout import TEMPORARY_DIR
from lakewarden.commit.statistics import aggregate_iostatistics
from lakewarden.devstack.processes import free_port
from lakewarden.settings import CommitterSettings, Settings
from lakewarden.storage.s3 import S3Storage

VALIDATE = "job_stage_optional_validate_output"


def _commit(table: Table, options: CommitterOptions, **kwargs: object) -> tuple[object, object]:
    committer = table.committer(options=options, **kwargs)
    committer.setup_job()
    files = job_files(2, 3)
    attempts = [run_task(committer, t, 0, f) for t, f in files.items()]
    return committer, attempts


def test_validate_output_checks_every_file_and_on_s3_its_etag(table: Table) -> None:
    committer, attempts = _commit(table, CommitterOptions(validate_output=True))
    committer.commit_job([a.attempt_id for a in attempts])  # type: ignore[attr-defined]
    summary = committer.summary()  # type: ignore[attr-defined]
    assert summary is not None and summary.state == "COMMITTED"
    assert summary.diagnostics["validated_files"] == "6"
    # SeaweedFS, like S3, tags a completed multipart upload with the MD5 of its parts' MD5s.
    assert summary.diagnostics["validated_etags"] == ("6" if table.is_s3 else "0")


def test_validation_is_off_by_default(table: Table) -> None:
    committer, attempts = _commit(table, CommitterOptions())
    committer.commit_job([a.attempt_id for a in attempts])  # type: ignore[attr-defined]
    summary = committer.summary()  # type: ignore[attr-defined]
    assert summary is not None and "validated_files" not in summary.diagnostics


def _replace_at_validation(
    table: Table, key: str, data: bytes, *, multipart: bool
) -> Callable[[str, str], None]:
    def hook(event: str, stage: str) -> None:
        if (event, stage) != ("start", VALIDATE):
            return
        table.storage.delete(key)
        if multipart:  # same size, other bytes, and an etag of the multipart form
            upload = table.storage.create_multipart(key)
            part = table.storage.upload_part(key, upload, 1, data)
            table.storage.complete_multipart(key, upload, [part])
        else:
            table.storage.write(key, data)

    return hook


def test_validate_output_refuses_a_file_of_another_size(table: Table) -> None:
    files = job_files(2, 3)
    victim = next(iter(files[0]))
    hook = _replace_at_validation(table, victim, b"short", multipart=False)
    committer, attempts = _commit(table, CommitterOptions(validate_output=True), stage_hook=hook)
    with pytest.raises(NonRetryableStageFailedError) as info:
        committer.commit_job([a.attempt_id for a in attempts])  # type: ignore[attr-defined]
    assert info.value.stage == VALIDATE
    assert isinstance(info.value.__cause__, SizeMismatchError)
    assert victim in str(info.value.__cause__)


@pytest.mark.s3
def test_validate_output_refuses_an_object_of_the_same_size_with_other_bytes(
    s3_table: Table,
) -> None:
    files = job_files(2, 3)
    victim, content = next(iter(files[0].items()))
    forged = bytes(reversed(content)) if content != content[::-1] else b"x" * len(content)
    assert len(forged) == len(content) and forged != content
    hook = _replace_at_validation(s3_table, victim, forged, multipart=True)
    options = CommitterOptions(validate_output=True)
    committer, attempts = _commit(s3_table, options, stage_hook=hook)
    with pytest.raises(NonRetryableStageFailedError) as info:
        committer.commit_job([a.attempt_id for a in attempts])  # type: ignore[attr-defined]
    assert info.value.stage == VALIDATE
    cause = info.value.__cause__
    assert isinstance(cause, EtagMismatchError), cause
    assert victim in str(cause) and "Help:" in str(cause)


def test_cleanup_off_keeps_the_job_directory_and_aborts_losers_uploads(table: Table) -> None:
    committer = table.committer(options=CommitterOptions(cleanup=False))
    committer.setup_job()
    files = job_files(2, 2)
    winners = [run_task(committer, t, 0, f) for t, f in files.items()]
    run_task(committer, 0, 1, job_files(1, 2, attempt=1)[0])  # a losing attempt of task 0
    committer.commit_job([a.attempt_id for a in winners])
    kept = [k for k in table.all_keys() if k.startswith(committer.layout.job_dir)]
    assert any(k.startswith(committer.layout.manifests_dir) for k in kept), kept
    assert committer.summary() is not None
    assert table.pending_uploads() == []  # a kept directory never leaves billed uploads


def test_cleanup_on_removes_the_job_directory(table: Table) -> None:
    committer, attempts = _commit(table, CommitterOptions())
    committer.commit_job([a.attempt_id for a in attempts])  # type: ignore[attr-defined]
    job_dir = committer.layout.job_dir  # type: ignore[attr-defined]
    assert [k for k in table.all_keys() if k.startswith(job_dir)] == []


def test_committer_settings_layer_over_the_defaults() -> None:
    service = CommitterSettings(threads=16, validate_output=False)
    request = CommitterSettings(validate_output=True, cleanup=False)
    options = CommitterOptions.from_settings(service, request)
    assert (options.threads, options.local_threads) == (16, 16)
    assert options.validate_output is True and options.cleanup is False
    assert CommitterOptions.from_settings(None, CommitterSettings()) == CommitterOptions()
    assert service.merged(request) == CommitterSettings(
        threads=16, validate_output=True, cleanup=False
    )


def test_environment_reaches_the_committer_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKEWARDEN_COMMITTER__THREADS", "7")
    monkeypatch.setenv("LAKEWARDEN_COMMITTER__VALIDATE_OUTPUT", "true")
    monkeypatch.setenv("LAKEWARDEN_COMMITTER__CLEANUP", "false")
    assert Settings().committer == CommitterSettings(threads=7, validate_output=True, cleanup=False)
    monkeypatch.setenv("LAKEWARDEN_COMMITTER__THREADS", "0")
    with pytest.raises(ValueError, match="threads"):
        Settings()


def test_table_write_uses_the_settings_committer_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS", raising=False)
    settings = Settings(committer=CommitterSettings(validate_output=True, cleanup=False))
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    table = LakeTable.create(
        str(tmp_path / "t"), name="t", record_key="id", schema=schema, settings=settings
    )
    table.write(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=schema), "insert")
    kept = [i.key for i in table.storage.list(TEMPORARY_DIR)]
    assert any("/manifests/" in k for k in kept), kept
    [summary] = [i.key for i in table.storage.list(".lakewarden/jobs/")]
    assert b'"validated_files":"1"' in table.storage.read(summary).replace(b" ", b"")
    reopened = LakeTable.open(table.uri, settings=Settings())
    reopened.write(pa.table({"id": [3], "v": ["c"]}, schema=schema), "insert")
    job_dirs = {k.split("/")[1] for k in (i.key for i in table.storage.list(TEMPORARY_DIR))}
    assert len(job_dirs) == 1  # the default (cleanup on) removed the second write's directory


def test_summary_reports_and_manifest_copies_go_where_the_options_say(
    table: Table, tmp_path: Path
) -> None:
    """Hadoop's summary.report.directory and diagnostics.manifest.directory: every job's
    summary (committed or failed) and the manifests it loaded, copied for people."""
    reports, manifests = tmp_path / "reports", tmp_path / "manifests"
    options = CommitterOptions(
        summary_report_directory=str(reports), diagnostics_manifest_directory=str(manifests)
    )
    committer, attempts = _commit(table, options)
    committer.commit_job([a.attempt_id for a in attempts])  # type: ignore[attr-defined]
    job = committer.job_id  # type: ignore[attr-defined]
    report = json.loads((reports / f"summary-{job}.json").read_text())
    assert report["state"] == "COMMITTED" and report["jobId"] == job
    copied = sorted(p.name for p in (manifests / job).iterdir())
    assert copied == sorted(f"{a.attempt_id}-manifest.json" for a in attempts)  # type: ignore[attr-defined]


@pytest.mark.s3
def test_an_s3_report_directory_is_reached_with_the_tables_settings(
    s3_table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The environment names no S3 endpoint the reports could reach: the copy must use the
    endpoint and credentials of the storage the table was opened with."""
    monkeypatch.setenv("LAKEWARDEN_S3__ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("LAKEWARDEN_S3__ACCESS_KEY_ID", "not-the-tables")
    storage = s3_table.storage
    assert isinstance(storage, S3Storage)
    reports = f"s3://{storage.bucket}/{storage.prefix}-reports"
    committer, attempts = _commit(s3_table, CommitterOptions(summary_report_directory=reports))
    committer.commit_job([a.attempt_id for a in attempts])  # type: ignore[attr-defined]
    job = committer.job_id  # type: ignore[attr-defined]
    copy = S3Storage(storage.bucket, f"{storage.prefix}-reports", storage.settings)
    assert json.loads(copy.read(f"summary-{job}.json"))["state"] == "COMMITTED"
    copy.delete(f"summary-{job}.json")


def test_a_failed_jobs_summary_is_reported_too(table: Table, tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    files = job_files(2, 3)
    victim = next(iter(files[0]))
    hook = _replace_at_validation(table, victim, b"short", multipart=False)
    failing = CommitterOptions(summary_report_directory=str(reports), validate_output=True)
    committer, attempts = _commit(table, failing, stage_hook=hook)
    with pytest.raises(NonRetryableStageFailedError):
        committer.commit_job([a.attempt_id for a in attempts])  # type: ignore[attr-defined]
    failed = json.loads((reports / f"summary-{committer.job_id}.json").read_text())  # type: ignore[attr-defined]
    assert failed["state"] == "FAILED" and failed["stage"] == VALIDATE


def test_an_unwritable_report_directory_never_fails_the_commit(
    table: Table, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    options = CommitterOptions(summary_report_directory=str(blocker))
    committer, attempts = _commit(table, options)
    result = committer.commit_job([a.attempt_id for a in attempts])  # type: ignore[attr-defined]
    assert result.files and committer.statistics.counter("report.failures") == 1  # type: ignore[attr-defined]


def test_the_summary_aggregates_the_task_attempts_iostatistics(table: Table) -> None:
    committer, attempts = _commit(table, CommitterOptions())
    committer.commit_job([a.attempt_id for a in attempts])  # type: ignore[attr-defined]
    summary = committer.summary()  # type: ignore[attr-defined]
    assert summary is not None
    counters = summary.iostatistics["counters"]
    # the task attempts' own statistics (from their manifests) and the job's, in one summary
    assert counters["task_stage_setup"] == 2, counters
    assert counters["job_stage_load_manifests"] == 1
    assert summary.iostatistics["meanstatistics"]["task_stage_setup.mean"]["samples"] == 2


def test_aggregation_adds_counters_and_means_and_keeps_extremes() -> None:
    a = {
        "counters": {"x": 1},
        "gauges": {},
        "minimums": {"x.min": 2.0},
        "maximums": {"x.max": 5.0},
        "meanstatistics": {"x.mean": {"samples": 1, "sum": 5.0}},
    }
    b = {
        "counters": {"x": 2, "y": 1},
        "gauges": {},
        "minimums": {"x.min": 1.0},
        "maximums": {"x.max": 3.0},
        "meanstatistics": {"x.mean": {"samples": 2, "sum": 4.0}},
    }
    assert aggregate_iostatistics(a, b) == {
        "counters": {"x": 3, "y": 1},
        "gauges": {},
        "minimums": {"x.min": 1.0},
        "maximums": {"x.max": 5.0},
        "meanstatistics": {"x.mean": {"samples": 3, "sum": 9.0}},
    }


@pytest.mark.s3
def test_manifests_record_each_uploads_etag_as_the_store_gives_it(s3_table: Table) -> None:
    committer, attempts = _commit(s3_table, CommitterOptions())
    manifest = json.loads(
        s3_table.storage.read(committer.layout.manifest_key(attempts[0].attempt_id))  # type: ignore[attr-defined]
    )
    committer.commit_job([a.attempt_id for a in attempts])  # type: ignore[attr-defined]
    for entry in manifest["files"]:
        assert entry["e"] is not None
        assert s3_table.storage.stat(entry["d"]).etag == entry["e"]


def test_the_summary_records_each_directorys_status(table: Table) -> None:
    """Leaf directories the commit created, and those that were there already (Hadoop's
    EntryStatus); an object store has none."""
    committer, attempts = _commit(table, CommitterOptions())
    committer.commit_job([a.attempt_id for a in attempts])  # type: ignore[attr-defined]
    first = committer.summary().diagnostics  # type: ignore[attr-defined]
    second_job = table.committer(options=CommitterOptions())
    second_job.setup_job()
    again = [run_task(second_job, t, 0, f) for t, f in job_files(2, 3, attempt=1).items()]
    second_job.commit_job([a.attempt_id for a in again])
    second = second_job.summary().diagnostics  # type: ignore[union-attr]
    made = (first["directories_created"], first["directories_existing"])
    found = (second["directories_created"], second["directories_existing"])
    if table.is_s3:
        assert made == found == ("0", "0")
    else:
        assert (made, found) == (("3", "0"), ("0", "3"))
