"""``ManifestCommitter``: the in-process API of the protocol (driver side), over the stages.

::

    committer = ManifestCommitter(storage, new_job_id())        # storage: the table root
    committer.setup_job()
    attempt = committer.task_attempt(task=0, attempt=0)         # on an executor, by ids
    attempt.setup(); attempt.write_file("p=1/f.parquet", data); attempt.commit()
    result = committer.commit_job([attempt.attempt_id])         # only the accepted attempts
    result.files  # (CommittedFile(key, size, attempt), ...) -> the caller's write statistics

A job commit may be run again, by any process, with the same job id and accepted attempts,
after a failure or a crash at any point: it resumes and ends with the same files.
"""

from __future__ import annotations

import logging
import traceback
import uuid
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from lakewarden.commit._spill import EntrySpill
from lakewarden.commit._store import CommitStore
from lakewarden.commit.attempt import TaskAttempt
from lakewarden.commit.errors import (
    ConflictingCommitRequestError,
    JobAbortedError,
    StageFailedError,
)
from lakewarden.commit.layout import JobLayout, TaskAttemptId
from lakewarden.commit.manifest import DIR_CREATED, DIR_EXISTS, AnnouncedManifest
from lakewarden.commit.options import CommitterOptions
from lakewarden.commit.reports import ReportWriter
from lakewarden.commit.stages import (
    CleanupArgs,
    CleanupStage,
    CompleteUploadsStage,
    CreateDirectoriesStage,
    JobAbortArgs,
    JobAbortResult,
    JobAbortStage,
    JobRecord,
    JobSetupStage,
    LoadArgs,
    LoadedManifests,
    LoadManifestsStage,
    RenameFilesStage,
    SaveSuccessStage,
    StageConfig,
    StageHook,
    ValidateManifestsStage,
    ValidateOutputStage,
    read_summary,
)
from lakewarden.commit.statistics import CommitStatistics, aggregate_iostatistics
from lakewarden.commit.success import SuccessData, build_summary
from lakewarden.storage import Storage

log = logging.getLogger("lakewarden.commit")


@dataclass(frozen=True, slots=True)
class CommittedFile:
    key: str  # relative to the table root
    size: int
    attempt: str  # the task attempt that wrote it


@dataclass(frozen=True)
class JobCommitResult:
    job_id: str
    files: tuple[CommittedFile, ...]
    summary_key: str
    resumed: bool  # an interrupted commit of this job was finished
    recorded: bool  # the job was committed before; this is the recorded result
    placed: int  # files this run renamed or completed
    already_done: int  # files found in place
    statistics: dict[str, dict[str, Any]]
    cleanup_error: str | None = None

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)


class ManifestCommitter:
    """The driver's committer for one job of one table (``storage`` is rooted at the table)."""

    def __init__(
        self,
        storage: Storage,
        job_id: str,
        *,
        job_attempt: int = 0,
        options: CommitterOptions | None = None,
        stage_hook: StageHook | None = None,
        announced: Mapping[str, AnnouncedManifest] | None = None,
        pool: Executor | None = None,
    ) -> None:
        """``announced``: manifests already at hand, by task attempt id (job-committer holds
        those of the ``TaskManifest`` events it read); the job commit loads them instead of
        reading storage once the saved manifests are shown to be the same bytes. ``pool``: the
        threads the stages' parallel work runs on, owned and kept open by the caller (a process
        that commits many small jobs saves a pool's thread starts per step); without it each
        job commit, clean-up and abort starts and stops a pool of its own. Its tasks never wait
        for one another."""
        self.storage = storage
        self.layout = JobLayout(job_id, job_attempt)
        self.options = options or CommitterOptions()
        self.store = CommitStore(storage)
        self.reports = ReportWriter(
            storage, self.options.summary_report_directory, None, self.store.stats
        )
        self._stage_hook = stage_hook
        self.announced: Mapping[str, AnnouncedManifest] = announced or {}
        self._nonce = uuid.uuid4().hex
        self._shared_pool = pool

    def __repr__(self) -> str:
        return f"ManifestCommitter({self.storage.uri!r}, job={self.layout.job_id})"

    @property
    def job_id(self) -> str:
        return self.layout.job_id

    @property
    def statistics(self) -> CommitStatistics:
        return self.store.stats

    @contextmanager
    def _pool(self, name: str) -> Iterator[Executor]:
        """The stages' pool: the one given to the constructor (kept open), else one of this
        job's own, stopped at the end of the step."""
        if self._shared_pool is not None:
            yield self._shared_pool
            return
        threads = self.options.threads_for(self.store.fast)
        with ThreadPoolExecutor(threads, thread_name_prefix=name) as pool:
            yield pool

    def _config(self, pool: Executor | None = None) -> StageConfig:
        return StageConfig(self.store, self.layout, self.options, pool, self._stage_hook)

    def setup_job(self) -> JobRecord:
        """Job setup. Raises: StageFailedError (JobIdInUseError)."""
        return JobSetupStage(self._config()).run(self._nonce)

    def task_attempt(self, task: int, attempt: int = 0) -> TaskAttempt:
        """The task attempt ``attempt`` of task ``task`` of this job."""
        return TaskAttempt(
            self.storage,
            self.layout,
            self.layout.attempt_id(task, attempt),
            options=self.options,
            stage_hook=self._stage_hook,
        )

    def summary(self) -> SuccessData | None:
        """The job's ``_SUCCESS`` summary, if any."""
        return read_summary(self.store, self.layout)

    def commit_job(
        self, accepted: Iterable[TaskAttemptId | str], *, description: str = ""
    ) -> JobCommitResult:
        """Commit the files of exactly the ``accepted`` task attempts (one per task).

        1. check the request; a job already committed returns its recorded result, an aborted
           one is refused;
        2. load manifests -> validate -> create directories -> rename files (or complete
           uploads) -> validate output (optional) -> save the success summary;
        3. on a stage failure, save a failure summary naming the stage, and raise;
        4. clean up (a failure here is reported in the result: the job is committed).

        Raises:
            ConflictingCommitRequestError: two attempts of one task, or another job's attempt.
            JobAbortedError: the job was aborted.
            StageFailedError: a stage failed (``stage``, cause in ``__cause__``); retryable
                when the cause was a store fault: calling again resumes.
        """
        attempts = self._check_request(accepted)  # 1.
        recorded = self.summary()
        if recorded is not None and recorded.state == "ABORTED":
            raise JobAbortedError(
                f"job {self.job_id} was aborted and can never commit",
                job_id=self.job_id,
            )
        if recorded is not None and recorded.state == "COMMITTED":
            return self._recorded(recorded, attempts)
        with self._pool("lw-commit") as pool:
            config = self._config(pool)
            try:
                result = self._commit(config, attempts, description)  # 2.
            except StageFailedError as err:
                self._save_failure(config, err)  # 3.
                raise
            return self._clean_up(config, result)  # 4.

    def _commit(
        self, config: StageConfig, attempts: list[TaskAttemptId], description: str
    ) -> JobCommitResult:
        with EntrySpill() as spill:
            loaded = LoadManifestsStage(config).run(LoadArgs(attempts, spill, self.announced))
            plan = ValidateManifestsStage(config).run(loaded)
            dirs = CreateDirectoriesStage(config).run(plan)
            place = CompleteUploadsStage if loaded.upload_mode else RenameFilesStage
            placed = place(config).run(plan)
            diagnostics = {
                "resumed": str(plan.resumed),
                "directories_created": str(dirs.count(DIR_CREATED)),
                "directories_existing": str(dirs.count(DIR_EXISTS)),
            }
            if self.options.validate_output:
                report = ValidateOutputStage(config).run(plan)
                diagnostics["validated_files"] = str(report.checked)
                diagnostics["validated_etags"] = str(report.etags_checked)
            committed = _committed_files(loaded)
            tasks = [m.iostatistics for m in loaded.manifests]
            summary = build_summary(
                job_id=self.job_id,
                state="COMMITTED",
                stage=None,
                committed=committed,
                # The job's own statistics with every accepted task attempt's (Hadoop's
                # aggregation: the summary accounts for the whole job's IO).
                iostatistics=aggregate_iostatistics(self.statistics.snapshot(), *tasks),
                diagnostics=diagnostics,
                description=description,
            )
            key = SaveSuccessStage(config).run(summary)
            self.reports.summary(self.job_id, summary.to_bytes())
        return JobCommitResult(
            job_id=self.job_id,
            files=_flatten(committed),
            summary_key=key,
            resumed=plan.resumed,
            recorded=False,
            placed=placed.placed,
            already_done=placed.already_done,
            statistics=self.statistics.snapshot(),
        )

    def _check_request(self, accepted: Iterable[TaskAttemptId | str]) -> list[TaskAttemptId]:
        attempts: list[TaskAttemptId] = []
        by_task: dict[int, TaskAttemptId] = {}
        for item in accepted:
            try:
                attempt = self.layout.check_attempt(item)
            except Exception as err:
                raise ConflictingCommitRequestError(
                    f"cannot commit job {self.job_id}: {err}", job_id=self.job_id
                ) from err
            other = by_task.setdefault(attempt.task_id.task, attempt)
            if other != attempt:
                raise ConflictingCommitRequestError(
                    f"job {self.job_id}: attempts {other} and {attempt} of one task are both "
                    "accepted. Help: the driver accepts exactly one attempt per task.",
                    job_id=self.job_id,
                )
            if other is attempt:
                attempts.append(attempt)
        return sorted(attempts)

    def _recorded(self, summary: SuccessData, attempts: list[TaskAttemptId]) -> JobCommitResult:
        if set(summary.committed_files) != {str(a) for a in attempts}:
            raise ConflictingCommitRequestError(
                f"job {self.job_id} was committed with attempts {sorted(summary.committed_files)}"
                f", not {[str(a) for a in attempts]}",
                job_id=self.job_id,
            )
        result = JobCommitResult(
            job_id=self.job_id,
            files=_flatten(summary.committed_files),
            summary_key=self.layout.summary_key,
            resumed=True,
            recorded=True,
            placed=0,
            already_done=sum(len(files) for files in summary.committed_files.values()),
            statistics=summary.iostatistics,
        )
        with self._pool("lw-commit") as pool:
            return self._clean_up(self._config(pool), result)

    def _clean_up(self, config: StageConfig, result: JobCommitResult) -> JobCommitResult:
        keep = not self.options.cleanup
        if keep and self.store.can_rename:  # nothing pending to abort: keep it all
            return result
        committed = frozenset(f.attempt for f in result.files)
        try:
            CleanupStage(config).run(CleanupArgs(committed, keep_directory=keep))
        except StageFailedError as err:
            log.warning("job %s committed, but its cleanup failed: %s", self.job_id, err)
            return _replace_cleanup_error(result, str(err))
        return result

    def _save_failure(self, config: StageConfig, err: StageFailedError) -> None:
        cause = err.cause
        summary = build_summary(
            job_id=self.job_id,
            state="FAILED",
            stage=err.stage,
            committed={},
            iostatistics=self.statistics.snapshot(),
            diagnostics={
                "stage": err.stage,
                "exception": f"{type(cause).__name__}: {cause}",
                "stacktrace": "".join(traceback.format_exception(cause)),
                # A refused path may not be UTF-8 (a lone surrogate): escape it, or the
                # summary that reports the refusal could not be written either.
                **(
                    {"path": err.path.encode("utf-8", "backslashreplace").decode()}
                    if err.path
                    else {}
                ),
            },
        )
        try:
            SaveSuccessStage(config).run(summary)
        except StageFailedError as save_err:  # the original failure matters more
            log.warning("job %s: could not save its failure summary: %s", self.job_id, save_err)
        self.reports.summary(self.job_id, summary.to_bytes())

    def abort_job(self, *, force: bool = False, reason: str = "") -> JobAbortResult:
        """Job abort: no file of the job stays in the table, no upload stays pending.

        Raises: StageFailedError (JobAlreadyCommittedError without ``force``)."""
        with self._pool("lw-abort") as pool:
            return JobAbortStage(self._config(pool)).run(JobAbortArgs(force, reason))


def _committed_files(loaded: LoadedManifests) -> dict[str, list[tuple[str, int]]]:
    return {
        str(m.attempt): [
            (dst, size) for chunk in m.chunks for _, dst, size in loaded.spill.pairs(chunk)
        ]
        for m in loaded.manifests
    }


def _flatten(committed: dict[str, list[tuple[str, int]]]) -> tuple[CommittedFile, ...]:
    return tuple(
        CommittedFile(key, size, attempt)
        for attempt, files in sorted(committed.items())
        for key, size in files
    )


def _replace_cleanup_error(result: JobCommitResult, error: str) -> JobCommitResult:
    from dataclasses import replace

    return replace(result, cleanup_error=error)
