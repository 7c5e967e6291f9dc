"""Helpers shared by the committer tests (imported by module name: pytest puts this folder on
``sys.path``)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lakewarden.commit import ManifestCommitter, TaskAttempt, TaskAttemptId, new_job_id
from lakewarden.commit.layout import JobLayout
from lakewarden.commit.manifest import MANIFEST_TYPE
from lakewarden.storage import Storage
from lakewarden.storage.faults import FaultyStorage, Operation
from lakewarden.storage.s3 import S3Storage
from lakewarden.testing import SimulatedCrash


@dataclass
class Table:
    storage: Storage
    s3_parent: S3Storage | None  # the bucket prefix above the table, to list pending uploads
    s3_name: str

    @property
    def is_s3(self) -> bool:
        return self.s3_parent is not None

    def data_files(self) -> dict[str, bytes]:
        """Every object outside the reserved areas, with its content."""
        return {
            info.key: self.storage.read(info.key)
            for info in self.storage.list("")
            if not info.key.startswith(("_temporary/", ".lakewarden/"))
        }

    def all_keys(self) -> list[str]:
        return [info.key for info in self.storage.list("")]

    def pending_uploads(self) -> list[str]:
        """Keys (relative to the table) of the table's pending multipart uploads."""
        if self.s3_parent is None:
            return []
        prefix = self.s3_name + "/"
        return sorted(u.key[len(prefix) :] for u in self.s3_parent.list_multipart_uploads(prefix))

    def committer(
        self, job_id: str | None = None, *, storage: Storage | None = None, **kwargs: Any
    ) -> ManifestCommitter:
        """A committer of the table, through ``storage`` (a fault wrapper of it) if given."""
        return ManifestCommitter(storage or self.storage, job_id or new_job_id(), **kwargs)


def run_task(
    committer: ManifestCommitter,
    task: int,
    attempt: int,
    files: dict[str, bytes],
    *,
    commit: bool = True,
) -> TaskAttempt:
    """Set up an attempt, write ``files`` (destination key -> content), commit it."""
    ta = committer.task_attempt(task, attempt)
    ta.setup()
    for key, data in files.items():
        ta.write_file(key, data)
    if commit:
        ta.commit()
    return ta


def job_files(tasks: int, per_task: int, *, attempt: int = 0) -> dict[int, dict[str, bytes]]:
    """Distinct files per task: ``p=<i % 3>/part-<task>-<i>-a<attempt>.parquet``."""
    return {
        t: {
            f"p={i % 3}/part-{t:03d}-{i:03d}-a{attempt}.parquet": f"t{t} i{i} a{attempt}".encode()
            * (i + 1)
            for i in range(per_task)
        }
        for t in range(tasks)
    }


def expected(files: dict[int, dict[str, bytes]]) -> dict[str, bytes]:
    return {key: data for per_task in files.values() for key, data in per_task.items()}


def forge_manifest(
    storage: Storage,
    layout: JobLayout,
    attempt: TaskAttemptId,
    entries: Iterable[dict[str, Any]],
) -> None:
    """Save a hand-made manifest for ``attempt`` (to test what validation refuses)."""
    doc = {
        "type": MANIFEST_TYPE,
        "version": 1,
        "jobId": layout.job_id,
        "jobAttemptNumber": layout.job_attempt,
        "taskID": str(attempt.task_id),
        "taskAttemptID": str(attempt),
        "taskAttemptDir": layout.task_attempt_dir(attempt),
        "files": list(entries),
        "directories": [],
        "extraData": {},
        "iostatistics": {},
    }
    storage.write(layout.manifest_key(attempt), json.dumps(doc).encode())


def crash_at(storage: Storage, operation: Operation, nth: int) -> FaultyStorage:
    """``storage`` wrapped so that call ``nth`` of ``operation`` through it (counting from
    here) crashes the caller (``SimulatedCrash``) before the call's effect."""
    faulty = FaultyStorage(storage)
    faulty.fail(operation, nth=nth, error=SimulatedCrash(f"crash at {operation} #{nth}"))
    return faulty


class CrashAtStage:
    """A ``stage_hook`` that crashes when ``stage`` reaches ``event`` ("start" or "end")."""

    def __init__(self, stage: str, event: str) -> None:
        self.stage, self.event = stage, event

    def __call__(self, event: str, stage: str) -> None:
        if stage == self.stage and event == self.event:
            raise SimulatedCrash(f"crash at {event} of {stage}")
