"""Named errors of the manifest committer.

Every error carries the job id and, where there is one, the offending ``path`` (a key relative
to the table root) as attributes, so a service can report them without parsing messages.

- Validation errors (``ManifestValidationError`` and subclasses) are raised *before any rename*:
  a job that fails with one has renamed nothing. They are not retryable: the manifests are wrong.
- ``StageFailedError`` wraps whatever made a stage fail and names the stage. It comes in a
  retryable flavour (the cause was a store fault: run the job commit again, it resumes) and a
  non-retryable one (the cause was bad input or a conflict).
"""

from __future__ import annotations

from lakewarden.errors import LakewardenError, NonRetryableError, RetryableError


class CommitError(LakewardenError):
    """Root of the committer's errors."""

    def __init__(
        self,
        message: str,
        *,
        job_id: str | None = None,
        path: str | None = None,
        attempt: str | None = None,
    ) -> None:
        super().__init__(message, attempt=attempt)
        self.job_id = job_id
        self.path = path


# -- job and task lifecycle --------------------------------------------------------------------


class JobIdInUseError(CommitError, NonRetryableError):
    """Job setup found the job directory of another job with the same id."""


class JobNotActiveError(CommitError, NonRetryableError):
    """A task operation on a job that was never set up, or was already committed, aborted or
    cleaned up (a zombie task attempt)."""


class JobAbortedError(CommitError, NonRetryableError):
    """Job commit of a job whose ``_SUCCESS`` summary records an abort."""


class JobAlreadyCommittedError(CommitError, NonRetryableError):
    """Job abort of a committed job (without ``force``): its files may be visible already."""


class TaskCommitError(CommitError, NonRetryableError):
    """A task attempt cannot commit (an unfinished upload, a conflicting earlier manifest)."""


class ConflictingCommitRequestError(CommitError, NonRetryableError):
    """A job commit names accepted attempts that differ from those of the interrupted commit it
    would resume, or names two attempts of one task, or an attempt of another job."""


# -- manifest validation (raised before any rename) --------------------------------------------


class ManifestValidationError(CommitError, NonRetryableError):
    """A manifest breaks a rule of the protocol; nothing has been renamed."""


class MalformedManifestError(ManifestValidationError):
    """The manifest is not valid JSON of the TaskManifest shape, or names another job/task."""


class MissingManifestError(ManifestValidationError):
    """An accepted task attempt has no manifest (it never committed)."""


class ManifestChangedError(ManifestValidationError):
    """A manifest differs from the one an interrupted commit validated."""


class PathOutsideTableError(ManifestValidationError):
    """A destination escapes the table root or lands in a reserved area (``_temporary/``,
    ``.lakewarden/``), by its name or through a symbolic link."""


class SourceOutsideAttemptError(ManifestValidationError):
    """A source is not inside the working directory of the attempt that listed it."""


class DuplicateDestinationError(ManifestValidationError):
    """Two entries (of one or several manifests) name the same destination."""


class SizeMismatchError(ManifestValidationError):
    """A file on storage does not have the size its manifest entry records."""


class EtagMismatchError(ManifestValidationError):
    """A committed object's etag is not the one its recorded upload parts make: the object at
    the destination is not the data the task attempt uploaded."""


class DestinationExistsError(ManifestValidationError):
    """A destination is occupied by a file this job did not put there."""


class MissingFileError(ManifestValidationError):
    """Neither the source nor a committed destination of an entry exists: data was lost or
    removed behind the committer's back."""


class DirectoryConflictError(ManifestValidationError):
    """A file exists where the commit needs a directory."""


# -- stage failures ------------------------------------------------------------------------------


class StageFailedError(CommitError):
    """A stage of the protocol failed; ``stage`` names it and ``__cause__`` says why."""

    def __init__(self, message: str, *, stage: str, job_id: str, cause: BaseException) -> None:
        path = getattr(cause, "path", None) or getattr(cause, "key", None)
        super().__init__(message, job_id=job_id, path=path if isinstance(path, str) else None)
        self.stage = stage
        self.cause = cause


class RetryableStageFailedError(StageFailedError, RetryableError):
    """The stage failed on a store fault: run the same operation again, it resumes."""


class NonRetryableStageFailedError(StageFailedError, NonRetryableError):
    """The stage failed on bad input or a conflict: running it again fails the same way."""


def stage_failed(stage: str, job_id: str, cause: BaseException) -> StageFailedError:
    """The flavour of ``StageFailedError`` that tells the caller whether to run it again."""
    message = f"stage {stage} of job {job_id} failed: {type(cause).__name__}: {cause}"
    if isinstance(cause, RetryableError):
        return RetryableStageFailedError(
            message + " Help: run the same operation again; it resumes where this one stopped.",
            stage=stage,
            job_id=job_id,
            cause=cause,
        )
    return NonRetryableStageFailedError(message, stage=stage, job_id=job_id, cause=cause)


__all__ = [
    "CommitError",
    "ConflictingCommitRequestError",
    "DestinationExistsError",
    "DirectoryConflictError",
    "DuplicateDestinationError",
    "JobAbortedError",
    "JobAlreadyCommittedError",
    "JobIdInUseError",
    "JobNotActiveError",
    "MalformedManifestError",
    "ManifestChangedError",
    "ManifestValidationError",
    "MissingFileError",
    "MissingManifestError",
    "NonRetryableStageFailedError",
    "PathOutsideTableError",
    "RetryableStageFailedError",
    "SizeMismatchError",
    "SourceOutsideAttemptError",
    "StageFailedError",
    "TaskCommitError",
    "stage_failed",
]
