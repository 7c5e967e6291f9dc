"""The Spark driver checks that a job-committer runs before it hands over a one-shot write's
commit, as ``Table.write`` does: with none running it fails at once with the named error and
sends nothing (the request would otherwise wait in Kafka, and the driver for its timeout)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import lakewarden.spark._job as spark_job
from lakewarden.clients.committer_presence import JobCommitterUnavailableError
from lakewarden.settings import Settings
from lakewarden.table.job_commit import CommitRequest
from lakewarden.table.stats import CommitStats


class _NoCommitter:
    closed = False

    def __init__(self, settings: Settings, *, wait_s: float) -> None:
        self.wait_s = wait_s

    def require(self, *, table: str, instant: str) -> None:
        raise JobCommitterUnavailableError(f"no job-committer for {table} {instant}")

    def close(self) -> None:
        _NoCommitter.closed = True


class _MustNotSend:
    def __init__(self, *_: Any, **__: Any) -> None:
        raise AssertionError("a commit request was sent although no job-committer runs")


def test_a_spark_write_with_no_job_committer_fails_named_and_sends_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(spark_job, "CommitterPresence", _NoCommitter)
    monkeypatch.setattr(spark_job, "CommitClient", _MustNotSend)
    table = SimpleNamespace(
        storage=SimpleNamespace(uri="/data/t"), config=SimpleNamespace(table_id="t-1")
    )
    spec = SimpleNamespace(instant="20261124040000000", job_id="job-1", committer=None)
    job = CommitRequest("20261124040000000", "job-1", (), CommitStats(operation="insert"))
    with pytest.raises(JobCommitterUnavailableError, match="no job-committer for t-1"):
        spark_job._commit_by_service(table, spec, job, Settings(), [])  # type: ignore[arg-type]
    assert _NoCommitter.closed
