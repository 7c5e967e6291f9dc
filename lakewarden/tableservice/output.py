"""An executor attempt's output: new base files, named after the plan instant and the attempt.

File names are ``<fileId>_<task>-<attempt>-0_<instant>.parquet``: the write token's stage id
carries the executor attempt (a random number per ``run_table_service`` call), so a retried
executor can tell its own files from those of earlier attempts (``rollback``).

Where the storage has private staging (rename, or held-back multipart uploads on S3) the files
go through the manifest committer under the job id ``<instant>-svc-<attempt>``: task attempt
writes, task commit, job commit before ``completed``. Elsewhere (the in-memory test store)
they go straight to their final keys; either way no snapshot sees them until a ``completed``
entry names them.
"""

from __future__ import annotations

import io
import secrets
import threading
from dataclasses import dataclass

import pyarrow as pa

from lakewarden.commit import CommitterOptions, ManifestCommitter, TaskAttempt
from lakewarden.storage import Storage
from lakewarden.table.config import TableConfig
from lakewarden.table.files import BaseFileName, WriteToken, file_key
from lakewarden.table.job_commit import check_statistics
from lakewarden.table.parquet_options import write_parquet
from lakewarden.table.stats import CommitStats, FileGroupId, WriteStat

__all__ = [
    "AttemptOutput",
    "BaseFile",
    "base_file",
    "new_attempt",
    "service_job_id",
    "service_job_prefix",
]

_OPTIONS = CommitterOptions()


def new_attempt() -> int:
    """A fresh executor attempt number (random: two executors never share one)."""
    return secrets.randbelow(2**31 - 2) + 1


def service_job_prefix(instant: str) -> str:
    """The committer job ids of every attempt of the plan ``instant`` start with this."""
    return f"{instant}-svc-"


def service_job_id(instant: str, attempt: int) -> str:
    return f"{service_job_prefix(instant)}{attempt}"


def file_bytes(config: TableConfig, name: str, table: pa.Table) -> bytes:
    """A base file's bytes: ``table`` (the merge schema) as the file ``name`` stores it."""
    table = config.stored_rows(table, name)
    buffer = io.BytesIO()
    write_parquet(table, buffer)
    return buffer.getvalue()


@dataclass(frozen=True)
class BaseFile:
    """A new base file of a table service, ready to be written at ``key``."""

    key: str
    body: bytes
    stat: WriteStat


def base_file(
    config: TableConfig, instant: str, file_group: FileGroupId, data: pa.Table, token: WriteToken
) -> BaseFile:
    """The base file of ``file_group`` holding ``data`` (the file schema without
    ``_lw_file_name``), written by the writer ``token`` for the plan ``instant``. The token's
    stage id is the executor attempt (``rollback`` tells attempts apart by it)."""
    name = BaseFileName(file_group.file_id, token, instant)
    key = file_key(file_group.partition_path, name.render())
    body = file_bytes(config, name.render(), data)
    stat = WriteStat(
        file_group=file_group,
        path=key,
        base_instant=instant,
        num_records=len(data),
        size_bytes=len(body),
    )
    return BaseFile(key, body, stat)


class AttemptOutput:
    """The ``OutputSink`` of one executor attempt (thread-safe: tasks may write in parallel)."""

    def __init__(self, storage: Storage, config: TableConfig, instant: str, attempt: int) -> None:
        self.storage = storage
        self.config = config
        self.instant = instant
        self.attempt = attempt
        self._guard = threading.Lock()
        self._direct: list[str] = []  # keys written at their final place (no staging)
        self._tasks: dict[int, TaskAttempt] = {}
        self.committer: ManifestCommitter | None = None
        if storage.capabilities.private_staging:
            self.committer = ManifestCommitter(
                storage, service_job_id(instant, attempt), options=_OPTIONS
            )
            self.committer.setup_job()

    def write(self, file_group: FileGroupId, data: pa.Table, *, task: int) -> WriteStat:
        out = base_file(
            self.config, self.instant, file_group, data, WriteToken(task, self.attempt, 0)
        )
        if self.committer is None:
            with self._guard:
                self._direct.append(out.key)  # before the write: a failed put may leave one
            self.storage.write_if_absent(out.key, out.body)
        else:
            self._task(task).write_file(out.key, out.body)
        return out.stat

    def _task(self, task: int) -> TaskAttempt:
        assert self.committer is not None
        with self._guard:
            attempt = self._tasks.get(task)
            if attempt is None:
                attempt = self.committer.task_attempt(task)
                attempt.setup()
                self._tasks[task] = attempt
            return attempt

    def place(self, stats: CommitStats) -> None:
        """Put the files at their final keys (still invisible): task commits and the job
        commit, then check that the statistics name exactly the placed files.

        Raises: StageFailedError, StatisticsMismatchError."""
        if self.committer is None:
            return
        accepted = []
        for attempt in self._tasks.values():
            attempt.commit()
            accepted.append(str(attempt.attempt_id))
        result = self.committer.commit_job(accepted, description=f"table service {self.instant}")
        check_statistics(stats, result.files, instant=self.instant, table=self.config.name)

    def discard(self) -> None:
        """Delete everything this attempt wrote or staged (best effort: a leftover is found by
        the next attempt's rollback or the cancel)."""
        if self.committer is not None:
            self.committer.abort_job(force=True, reason=f"table service {self.instant} attempt")
        for key in self._direct:
            self.storage.delete(key)
