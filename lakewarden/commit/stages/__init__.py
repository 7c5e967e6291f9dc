"""The stages of the manifest committer protocol, one class each (Hadoop's stage classes).

========================  ==============================  ====================================
stage                     name (statistic)                does
========================  ==============================  ====================================
JobSetupStage             job_stage_setup                 job.json, job attempt directories
TaskSetupStage            task_stage_setup                task attempt working directory
TaskCommitStage           task_stage_commit               scan, save the attempt's manifest
TaskAbortStage            task_stage_abort_task           discard an attempt's work
LoadManifestsStage        job_stage_load_manifests        read accepted manifests, path rules
ValidateManifestsStage    job_stage_validate_manifests    duplicates, symlinks, sizes, plan
CreateDirectoriesStage    job_stage_create_target_dirs    leaf destination directories
RenameFilesStage          job_stage_rename_files          parallel no-replace renames
CompleteUploadsStage      job_stage_complete_uploads      parallel multipart completions (S3)
ValidateOutputStage       job_stage_optional_validate..   stat every destination (optional)
SaveSuccessStage          job_stage_save_success_marker   the _SUCCESS summary
CleanupStage              job_stage_cleanup               pending uploads, attempt dirs, job dir
JobAbortStage             job_stage_abort                 ABORTED summary, roll back, clean up
========================  ==============================  ====================================
"""

from lakewarden.commit.stages._base import Stage, StageConfig, StageHook, run_parallel
from lakewarden.commit.stages.abort import JobAbortArgs, JobAbortResult, JobAbortStage
from lakewarden.commit.stages.commit_files import (
    CompleteUploadsStage,
    CreateDirectoriesStage,
    PlacedFiles,
    RenameFilesStage,
)
from lakewarden.commit.stages.finish import (
    CleanupArgs,
    CleanupResult,
    CleanupStage,
    SaveSuccessStage,
    read_summary,
)
from lakewarden.commit.stages.load import (
    LoadArgs,
    LoadedManifest,
    LoadedManifests,
    LoadManifestsStage,
)
from lakewarden.commit.stages.setup import JobRecord, JobSetupStage, TaskSetupStage
from lakewarden.commit.stages.task import (
    TaskAbortResult,
    TaskAbortStage,
    TaskCommitArgs,
    TaskCommitResult,
    TaskCommitStage,
)
from lakewarden.commit.stages.validate import (
    CommitPlan,
    OutputReport,
    ValidatedPlan,
    ValidateManifestsStage,
    ValidateOutputStage,
)

__all__ = [
    "CleanupArgs",
    "CleanupResult",
    "CleanupStage",
    "CommitPlan",
    "CompleteUploadsStage",
    "CreateDirectoriesStage",
    "JobAbortArgs",
    "JobAbortResult",
    "JobAbortStage",
    "JobRecord",
    "JobSetupStage",
    "LoadArgs",
    "LoadManifestsStage",
    "LoadedManifest",
    "LoadedManifests",
    "OutputReport",
    "PlacedFiles",
    "RenameFilesStage",
    "SaveSuccessStage",
    "Stage",
    "StageConfig",
    "StageHook",
    "TaskAbortResult",
    "TaskAbortStage",
    "TaskCommitArgs",
    "TaskCommitResult",
    "TaskCommitStage",
    "TaskSetupStage",
    "ValidateManifestsStage",
    "ValidateOutputStage",
    "ValidatedPlan",
    "read_summary",
    "run_parallel",
]
