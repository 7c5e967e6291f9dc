"""The manifest committer protocol (Hadoop's), as a chain of stages, for local files and S3.

Task attempts write their data files privately; task commit saves a JSON manifest of them; job
commit loads the manifests of the attempts the driver accepted, validates them, puts the files
in place in parallel and saves a ``_SUCCESS`` summary. See ``committer`` for the API,
``stages`` for the protocol steps, ``layout`` for ids and directories, ``manifest`` and
``success`` for the JSON formats, ``uploads`` for the S3 variant.

Where we do better than Hadoop:

- **Exclusive by construction.** Manifests are named per task *attempt*; the job commit loads
  exactly those of the accepted attempts, so a losing or zombie attempt's manifest is never
  read. Renames never replace a file (``RENAME_NOREPLACE``; ``If-None-Match: *`` on S3).
- **Validation before any rename**: sources inside their own attempt's directory, destinations
  inside the table and outside ``_temporary/`` and ``.lakewarden/`` (also through symlinks),
  sizes as recorded, destinations free and named once across all manifests. A violation
  fails the job with the offending path, and nothing has been renamed.
- **Resumable.** Every stage can be run again. The first validated run records a commit plan
  (accepted attempts, manifest checksums); a rerun, by any process, recognises renames
  already done (source gone, destination present with the recorded size), refuses a request
  with other attempts, and returns the recorded result of a committed job.
- **Bounded memory.** Entries are spilled to a private temporary file while manifests load
  (a few manifests at a time), so a million entries never sit in memory together.
- **S3 without rename.** Tasks upload to final keys and hold back completion; the job commit
  completes the uploads; abort and cleanup find every pending upload through records the
  attempts write *before* creating them.
"""

from lakewarden.commit.attempt import TaskAttempt
from lakewarden.commit.committer import CommittedFile, JobCommitResult, ManifestCommitter
from lakewarden.commit.errors import (
    CommitError,
    ConflictingCommitRequestError,
    DestinationExistsError,
    DirectoryConflictError,
    DuplicateDestinationError,
    JobAbortedError,
    JobAlreadyCommittedError,
    JobIdInUseError,
    JobNotActiveError,
    MalformedManifestError,
    ManifestChangedError,
    ManifestValidationError,
    MissingFileError,
    MissingManifestError,
    NonRetryableStageFailedError,
    PathOutsideTableError,
    RetryableStageFailedError,
    SizeMismatchError,
    SourceOutsideAttemptError,
    StageFailedError,
    TaskCommitError,
)
from lakewarden.commit.layout import InvalidIdError, JobLayout, TaskAttemptId, TaskId, new_job_id
from lakewarden.commit.manifest import (
    AnnouncedManifest,
    FileEntry,
    ManifestHeader,
    SavedManifest,
    UploadRef,
)
from lakewarden.commit.options import CommitterOptions
from lakewarden.commit.statistics import CommitStatistics
from lakewarden.commit.success import SuccessData

__all__ = [
    "AnnouncedManifest",
    "CommitError",
    "CommitStatistics",
    "CommittedFile",
    "CommitterOptions",
    "ConflictingCommitRequestError",
    "DestinationExistsError",
    "DirectoryConflictError",
    "DuplicateDestinationError",
    "FileEntry",
    "InvalidIdError",
    "JobAbortedError",
    "JobAlreadyCommittedError",
    "JobCommitResult",
    "JobIdInUseError",
    "JobLayout",
    "JobNotActiveError",
    "MalformedManifestError",
    "ManifestChangedError",
    "ManifestCommitter",
    "ManifestHeader",
    "ManifestValidationError",
    "MissingFileError",
    "MissingManifestError",
    "NonRetryableStageFailedError",
    "PathOutsideTableError",
    "RetryableStageFailedError",
    "SavedManifest",
    "SizeMismatchError",
    "SourceOutsideAttemptError",
    "StageFailedError",
    "SuccessData",
    "TaskAttempt",
    "TaskAttemptId",
    "TaskCommitError",
    "TaskId",
    "UploadRef",
    "new_job_id",
]
