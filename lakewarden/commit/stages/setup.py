"""Job setup and task setup."""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict, Field

from lakewarden.commit._store import CommitStore
from lakewarden.commit.errors import JobIdInUseError, JobNotActiveError
from lakewarden.commit.layout import JobLayout, TaskAttemptId
from lakewarden.commit.stages._base import Stage
from lakewarden.storage import AlreadyExistsError


class JobRecord(BaseModel):
    """``job.json``: written once by job setup; its nonce tells a re-run of the same setup
    (idempotent) from a second job that picked the same id (refused)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    job_id: str = Field(alias="jobId")
    job_attempt_number: int = Field(alias="jobAttemptNumber")
    nonce: str
    created_ms: int = Field(alias="createdMs")
    mode: str = Field(description="rename | upload")


class JobSetupStage(Stage[str, JobRecord]):
    """Create the job attempt directory; the argument is the setup's nonce.

    1. refuse if a ``_SUCCESS`` summary exists for this job id (a finished job);
    2. write ``job.json`` only if absent; if present, accept it only when it carries our nonce;
    3. on a filesystem, create the manifests and tasks directories.

    Raises: JobIdInUseError.
    """

    name = "job_stage_setup"

    def _execute(self, args: str) -> JobRecord:
        layout, store = self.layout, self.store
        if store.size(layout.summary_key) is not None:  # 1.
            raise JobIdInUseError(
                f"job {layout.job_id} already finished ({layout.summary_key} exists). "
                "Help: every job needs a fresh id (lakewarden.commit.new_job_id()).",
                job_id=layout.job_id,
            )
        record = JobRecord(
            job_id=layout.job_id,
            job_attempt_number=layout.job_attempt,
            nonce=args,
            created_ms=int(time.time() * 1000),
            mode="rename" if store.can_rename else "upload",
        )
        try:  # 2.
            store.write_staging(layout.job_record_key, record.model_dump_json().encode())
        except AlreadyExistsError:
            found = JobRecord.model_validate_json(store.read(layout.job_record_key))
            if found.nonce != args:
                raise JobIdInUseError(
                    f"job id {layout.job_id} is in use by another job (set up at "
                    f"{found.created_ms} ms). Help: every job needs a fresh id.",
                    job_id=layout.job_id,
                ) from None
            record = found
        store.make_dirs(layout.manifests_dir, staging=True)  # 3.
        store.make_dirs(layout.tasks_dir, staging=True)
        return record


def require_active_job(store: CommitStore, layout: JobLayout, what: str) -> None:
    """Raises JobNotActiveError unless the job is set up and not finished."""
    if store.size(layout.job_record_key) is None or store.size(layout.summary_key) is not None:
        raise JobNotActiveError(
            f"cannot {what}: job {layout.job_id} is not set up, or already committed, aborted "
            "or cleaned up. Help: a task attempt of a finished job is a zombie; stop it.",
            job_id=layout.job_id,
        )


class TaskSetupStage(Stage[TaskAttemptId, str]):
    """Create a task attempt's working directory; returns its key.

    1. check that the job is active (a zombie of a finished job is refused here);
    2. on a filesystem, create ``tasks/<taskAttemptId>/``.

    Raises: JobNotActiveError.
    """

    name = "task_stage_setup"

    def _execute(self, args: TaskAttemptId) -> str:
        require_active_job(self.store, self.layout, f"set up task attempt {args}")  # 1.
        directory = self.layout.task_attempt_dir(args)
        self.store.make_dirs(directory, staging=True)  # 2.
        return directory
