"""A job commit from manifests announced in TaskManifest events: no read of a manifest whose
saved copy is shown to be the same bytes; storage read for what is missing or different."""

from __future__ import annotations

from typing import Any

import pytest
from _commit_helpers import Table, expected, job_files, run_task

from lakewarden.commit import (
    AnnouncedManifest,
    ManifestCommitter,
    MissingManifestError,
    StageFailedError,
    new_job_id,
)
from lakewarden.commit.stages.load import EVENT_MISMATCHES, FROM_EVENTS, FROM_STORAGE
from lakewarden.events import decode, encode
from lakewarden.events.manifests import announced_manifest, task_manifest_event
from lakewarden.testing import CallRecorder


def _announce(committer: ManifestCommitter, files: dict[int, dict[str, bytes]]) -> dict[str, Any]:
    """Run every task; returns each attempt's TaskManifest record, as a consumer decodes it."""
    records = {}
    for task, per_task in files.items():
        # Committed twice: the second (repeated) commit must announce the bytes the first saved.
        result = run_task(committer, task, 0, per_task).commit()
        assert result.repeated and result.saved is not None
        record = task_manifest_event(
            table_id="t",
            producer_id="test",
            table_uri=committer.storage.uri,
            instant="20260101000000000",
            job_id=committer.job_id,
            task_id=str(result.attempt.task_id),
            attempt_id=str(result.attempt),
            manifest_key=result.manifest_key,
            file_count=result.files,
            total_bytes=result.bytes,
            saved=result.saved,
        )
        records[str(result.attempt)] = decode(encode("TaskManifest", record)).record
    return records


def _held(records: dict[str, Any]) -> dict[str, AnnouncedManifest]:
    held = {}
    for attempt, record in records.items():
        manifest = announced_manifest(record)
        assert manifest is not None
        held[attempt] = manifest
    return held


def _run(table: Table, tasks: int = 3) -> tuple[str, dict[int, dict[str, bytes]], dict[str, Any]]:
    job_id = new_job_id()
    committer = table.committer(job_id)
    committer.setup_job()
    files = job_files(tasks, 4)
    return job_id, files, _announce(committer, files)


def test_a_job_commit_reads_no_manifest_that_came_in_an_event(table: Table) -> None:
    job_id, files, records = _run(table)
    recorder = CallRecorder(table.storage)
    committer = ManifestCommitter(recorder, job_id, announced=_held(records))
    result = committer.commit_job(sorted(records))
    assert table.data_files() == expected(files)
    assert recorder.keys("read", containing="/manifests/") == []
    assert len(recorder.keys("list", containing="/manifests/")) == 1  # the one check
    assert committer.statistics.counter(FROM_EVENTS) == 3
    assert committer.statistics.counter(FROM_STORAGE) == 0
    summary = committer.summary()
    assert summary is not None and summary.iostatistics["counters"][FROM_EVENTS] == 3
    assert result.files and sum(len(f) for f in files.values()) == len(result.files)


def test_a_pointer_only_attempt_is_read_from_storage(table: Table) -> None:
    job_id, files, records = _run(table)
    pointer = sorted(records)[1]
    records[pointer] = {**records[pointer], "manifest": None}  # too large: a pointer
    held = {a: m for a, r in records.items() if (m := announced_manifest(r)) is not None}
    recorder = CallRecorder(table.storage)
    committer = ManifestCommitter(recorder, job_id, announced=held)
    committer.commit_job(sorted(records))
    assert table.data_files() == expected(files)
    assert [k.rpartition("/")[2] for k in recorder.keys("read", containing="/manifests/")] == [
        f"{pointer}-manifest.json"
    ]
    assert committer.statistics.counter(FROM_EVENTS) == 2
    assert committer.statistics.counter(FROM_STORAGE) == 1


def test_a_copy_that_differs_from_the_saved_manifest_is_not_used(table: Table) -> None:
    """The saved manifest is the durable record: an event whose copy lists another size (its
    digest still the task's) loses to it, and the commit places what storage says."""
    job_id, files, records = _run(table, tasks=2)
    forged = sorted(records)[0]
    body = records[forged]["manifest"]
    first = {**body["files"][0], "size": body["files"][0]["size"] + 1}
    records[forged] = {
        **records[forged],
        "manifest": {**body, "files": [first, *body["files"][1:]]},
    }
    recorder = CallRecorder(table.storage)
    committer = ManifestCommitter(recorder, job_id, announced=_held(records))
    committer.commit_job(sorted(records))
    assert table.data_files() == expected(files)
    assert len(recorder.keys("read", containing="/manifests/")) == 1
    assert committer.statistics.counter(EVENT_MISMATCHES) == 1
    assert committer.statistics.counter(FROM_EVENTS) == 1


def test_an_announced_attempt_whose_manifest_is_not_saved_is_refused(table: Table) -> None:
    """An event is not a saved manifest: without the durable record the commit fails as it
    always did (MissingManifestError), nothing placed."""
    job_id, _, records = _run(table, tasks=2)
    gone = sorted(records)[0]
    table.storage.delete(announced_manifest(records[gone]).key)  # type: ignore[union-attr]
    committer = ManifestCommitter(table.storage, job_id, announced=_held(records))
    with pytest.raises(StageFailedError) as failed:
        committer.commit_job(sorted(records))
    assert isinstance(failed.value.__cause__, MissingManifestError)
    assert table.data_files() == {}
