"""Job, task and task attempt ids, and where a job keeps its work (keys relative to the table).

Ids follow Hadoop's shape and derive from the job id, so an id names its job unambiguously::

    job id           <jobId>                     uuid4 hex, optionally "<prefix>-<hex>"
    task id          task_<jobId>_<task:06d>
    task attempt id  attempt_<jobId>_<task:06d>_<attempt>

Directory layout (Hadoop's, under the table root)::

    _temporary/manifest_<jobId>/                  job directory
      <jobAttempt:02d>/                           job attempt directory
        job.json                                  written once by job setup (unique job ids)
        commit-plan.json                          written once by the first validated job commit
        tasks/<taskAttemptId>/<escaped dest key>  rename mode: a task attempt's data files
        tasks/<taskAttemptId>/uploads/<n>.json    upload mode: its pending multipart uploads
        manifests/<taskAttemptId>-manifest.json   a committed task attempt's manifest
    .lakewarden/jobs/<jobId>/_SUCCESS             the job's summary (kept after cleanup)

A task attempt's working directory is flat: each data file is named by its destination key
with ``%`` and ``/`` escaped (``p=1/f.parquet`` -> ``p=1%2Ff.parquet``), falling back to a
tree (each segment escaped) only for names too long for the filesystem. Hadoop mirrors the
destination tree there; a flat directory makes cleanup remove one directory per attempt instead
of a copy of the partition tree (every ``rmdir`` is a metadata update the filesystem journals,
and a job has as many attempts as tasks).

Manifests are named per *attempt*, not per task as in Hadoop: the job commit loads exactly the
manifests of the attempts the driver accepted, so a second attempt of a task, or a zombie,
can save a manifest but can never have it committed.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from lakewarden.commit.errors import CommitError
from lakewarden.errors import NonRetryableError
from lakewarden.storage._keys import check_key

TEMPORARY_DIR = "_temporary/"
METADATA_DIR = ".lakewarden/"
RESERVED_PREFIXES = (TEMPORARY_DIR, METADATA_DIR)
_JOB_ID = r"[A-Za-z0-9][A-Za-z0-9-]{0,127}"
_JOB_ID_RE = re.compile(_JOB_ID)
_TASK_RE = re.compile(rf"task_(?P<job>{_JOB_ID})_(?P<task>\d{{6,}})")
_ATTEMPT_RE = re.compile(rf"attempt_(?P<job>{_JOB_ID})_(?P<task>\d{{6,}})_(?P<attempt>\d+)")


class InvalidIdError(CommitError, NonRetryableError):
    """A job, task or task attempt id does not have the expected shape."""


def new_job_id(prefix: str | None = None) -> str:
    """A fresh, unique job id: a uuid4, after ``prefix-`` when given (e.g. the instant).

    Raises: InvalidIdError (a prefix with characters other than letters, digits and '-')."""
    job_id = uuid.uuid4().hex if prefix is None else f"{prefix}-{uuid.uuid4().hex}"
    return check_job_id(job_id)


def check_job_id(job_id: str) -> str:
    """Return ``job_id``. Raises: InvalidIdError (not letters, digits and '-', 1-128 long)."""
    if not _JOB_ID_RE.fullmatch(job_id):
        raise InvalidIdError(
            f"invalid job id {job_id!r}: use 1-128 letters, digits and '-' (no '_', which "
            "separates the parts of task ids)."
        )
    return job_id


@dataclass(frozen=True, slots=True, order=True)
class TaskId:
    """One task of a job; ``str()`` and ``parse`` round-trip."""

    job_id: str
    task: int

    def __post_init__(self) -> None:
        check_job_id(self.job_id)
        if self.task < 0:
            raise InvalidIdError(f"task number must be >= 0, got {self.task}")

    def __str__(self) -> str:
        return f"task_{self.job_id}_{self.task:06d}"

    @classmethod
    def parse(cls, text: str) -> TaskId:
        """Raises: InvalidIdError."""
        match = _TASK_RE.fullmatch(text)
        if match is None:
            raise InvalidIdError(f"invalid task id {text!r}: expected task_<jobId>_<000000>")
        return cls(match["job"], int(match["task"]))


@dataclass(frozen=True, slots=True, order=True)
class TaskAttemptId:
    """One attempt of a task; ``str()`` and ``parse`` round-trip."""

    task_id: TaskId
    attempt: int

    def __post_init__(self) -> None:
        if self.attempt < 0:
            raise InvalidIdError(f"attempt number must be >= 0, got {self.attempt}")

    @property
    def job_id(self) -> str:
        return self.task_id.job_id

    def __str__(self) -> str:
        return f"attempt_{self.task_id.job_id}_{self.task_id.task:06d}_{self.attempt}"

    @classmethod
    def of(cls, job_id: str, task: int, attempt: int = 0) -> TaskAttemptId:
        return cls(TaskId(job_id, task), attempt)

    @classmethod
    def parse(cls, text: str) -> TaskAttemptId:
        """Raises: InvalidIdError."""
        match = _ATTEMPT_RE.fullmatch(text)
        if match is None:
            raise InvalidIdError(
                f"invalid task attempt id {text!r}: expected attempt_<jobId>_<000000>_<n>"
            )
        return cls(TaskId(match["job"], int(match["task"])), int(match["attempt"]))


@dataclass(frozen=True, slots=True)
class JobLayout:
    """The keys a job attempt uses, relative to the table root."""

    job_id: str
    job_attempt: int = 0

    def __post_init__(self) -> None:
        check_job_id(self.job_id)
        if not 0 <= self.job_attempt <= 99:
            raise InvalidIdError(f"job attempt must be 0-99, got {self.job_attempt}")

    @property
    def job_dir(self) -> str:
        return f"{TEMPORARY_DIR}manifest_{self.job_id}/"

    @property
    def attempt_dir(self) -> str:
        return f"{self.job_dir}{self.job_attempt:02d}/"

    @property
    def tasks_dir(self) -> str:
        return self.attempt_dir + "tasks/"

    @property
    def manifests_dir(self) -> str:
        return self.attempt_dir + "manifests/"

    @property
    def job_record_key(self) -> str:
        return self.attempt_dir + "job.json"

    @property
    def plan_key(self) -> str:
        return self.attempt_dir + "commit-plan.json"

    @property
    def summary_key(self) -> str:
        return f"{METADATA_DIR}jobs/{self.job_id}/_SUCCESS"

    def task_attempt_dir(self, attempt: TaskAttemptId) -> str:
        """Working directory of ``attempt`` (its data files mirror their destinations)."""
        return f"{self.tasks_dir}{attempt}/"

    def uploads_dir(self, attempt: TaskAttemptId) -> str:
        """Where an attempt in upload mode records its pending multipart uploads."""
        return f"{self.task_attempt_dir(attempt)}uploads/"

    def manifest_key(self, attempt: TaskAttemptId) -> str:
        return f"{self.manifests_dir}{attempt}-manifest.json"

    def attempt_id(self, task: int, attempt: int = 0) -> TaskAttemptId:
        return TaskAttemptId.of(self.job_id, task, attempt)

    def check_attempt(self, attempt: TaskAttemptId | str) -> TaskAttemptId:
        """``attempt`` as an id of this job.

        Raises: InvalidIdError (malformed, or an attempt of another job)."""
        parsed = TaskAttemptId.parse(attempt) if isinstance(attempt, str) else attempt
        if parsed.job_id != self.job_id:
            raise InvalidIdError(
                f"task attempt {parsed} belongs to job {parsed.job_id}, not {self.job_id}"
            )
        return parsed


_NAME_MAX = 240  # bytes; filesystems allow 255 per name, keep room for temporary prefixes


def attempt_file_name(dest_key: str) -> str:
    """Where, relative to its attempt directory, the data file for ``dest_key`` is written.

    Raises: InvalidKeyError (``dest_key`` is not a valid key, e.g. not encodable as UTF-8)."""
    check_key(dest_key)  # the name's length is measured in bytes: the key must have them
    flat = dest_key.replace("%", "%25").replace("/", "%2F")
    if len(flat.encode()) <= _NAME_MAX:
        return flat
    return "/".join(segment.replace("%", "%25") for segment in dest_key.split("/"))


def destination_of(attempt_file: str) -> str:
    """The destination key of an attempt file (inverse of ``attempt_file_name``)."""
    return "/".join(
        segment.replace("%2F", "/").replace("%25", "%") for segment in attempt_file.split("/")
    )


def is_reserved(key: str) -> bool:
    """Whether ``key`` lies in an area data files may never be committed to."""
    return key.startswith(RESERVED_PREFIXES) or key in ("_temporary", ".lakewarden")
