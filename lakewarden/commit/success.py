"""The ``_SUCCESS`` summary: Hadoop's ``SuccessData`` JSON (as the manifest committer writes it).

**Where it goes.** Hadoop writes ``<dest>/_SUCCESS``, and the next job overwrites it. A table
receives many jobs, so each job gets its own: ``.lakewarden/jobs/<jobId>/_SUCCESS``. It is
outside any data directory (readers never list it), survives the cleanup of ``_temporary/``,
and is the durable answer to "what happened to job X" — a committer that finds
``state == "COMMITTED"`` there returns the recorded result instead of committing again, and
one that finds ``"ABORTED"`` refuses to commit.

**When.** On success (``success: true``, ``state: "COMMITTED"``), on failure (``success:
false``, ``state: "FAILED"``, ``stage`` naming the failed stage, ``diagnostics`` with the
exception as Hadoop's ``exception`` / ``stacktrace`` keys), and on abort (``"ABORTED"``),
written *before* the abort destroys anything so that the job can never commit afterwards.

**Extension.** ``committedFiles`` (absent in Hadoop, which ignores unknown fields) lists every
committed file with its size, by task attempt: the caller builds its write statistics from it,
also when it asks again after a crash. ``filenames`` is capped at 100, as Hadoop caps it.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lakewarden.commit.errors import CommitError
from lakewarden.commit.statistics import empty_iostatistics

SUCCESS_NAME = "org.apache.hadoop.fs.s3a.commit.files.SuccessData/1"
COMMITTER_NAME = "lakewarden-manifest"
FILENAMES_LIMIT = 100
State = Literal["COMMITTED", "FAILED", "ABORTED"]


class SuccessData(BaseModel):
    """One job's summary; field names are Hadoop's."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    name: str = SUCCESS_NAME
    timestamp: int = Field(description="epoch milliseconds")
    date: str
    hostname: str
    committer: str = COMMITTER_NAME
    description: str = ""
    job_id: str = Field(alias="jobId")
    job_id_source: str = Field(default="lakewarden", alias="jobIdSource")
    success: bool
    state: State
    stage: str | None = None
    metrics: dict[str, int] = Field(default_factory=dict)
    diagnostics: dict[str, str] = Field(default_factory=dict)
    filenames: tuple[str, ...] = ()
    iostatistics: dict[str, dict[str, Any]] = Field(default_factory=empty_iostatistics)
    committed_files: dict[str, list[tuple[str, int]]] = Field(
        default_factory=dict, alias="committedFiles"
    )

    def to_bytes(self) -> bytes:
        return self.model_dump_json(by_alias=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, *, key: str) -> SuccessData:
        """Raises: CommitError (not a SuccessData document)."""
        try:
            return cls.model_validate_json(data)
        except ValidationError as err:
            raise CommitError(f"{key} is not a _SUCCESS summary: {err}", path=key) from err


def build_summary(
    *,
    job_id: str,
    state: State,
    stage: str | None,
    committed: dict[str, list[tuple[str, int]]],
    iostatistics: dict[str, dict[str, Any]],
    diagnostics: dict[str, str],
    description: str = "",
) -> SuccessData:
    """A summary stamped with the current time and host."""
    now_ms = int(time.time() * 1000)
    names = _first(_all_names(committed), FILENAMES_LIMIT)
    return SuccessData(
        timestamp=now_ms,
        date=datetime.fromtimestamp(now_ms / 1000, UTC).isoformat(),
        hostname=socket.gethostname(),
        job_id=job_id,
        success=state == "COMMITTED",
        state=state,
        stage=stage,
        metrics={
            "files": sum(len(files) for files in committed.values()),
            "bytes": sum(size for files in committed.values() for _, size in files),
        },
        diagnostics=diagnostics,
        filenames=tuple(names),
        iostatistics=iostatistics,
        committed_files=committed,
        description=description,
    )


def _all_names(committed: dict[str, list[tuple[str, int]]]) -> Iterable[str]:
    for files in committed.values():
        for key, _ in files:
            yield key


def _first(items: Iterable[str], n: int) -> list[str]:
    out: list[str] = []
    for item in items:
        if len(out) == n:
            break
        out.append(item)
    return out
