"""Job commit, then ``completed``: the one implementation of a table commit through the
manifest committer (``lakewarden.commit``).

Every producer of an instant commits through this function and gives an instant up through
``abandon``: ``Table.write`` (in-process), the Spark driver when no Kafka is configured, the
job-committer service (``services/job_committer``) when it is, and the error-table sink
(``lakewarden.errortable``); table services will too::

    txn = WriteTransaction.resume(timeline, coordinator, table_id, instant, actor=me)
    outcome = commit_instant(ManifestCommitter(storage, job_id), txn, CommitRequest(...))

Protocol of ``commit_instant`` (the one completion protocol of ``lakewarden.table.completion``
for an ingestion: the instant's files are placed while invisible, so its fence is the
``rolled_back`` of step 5, written before any of them is deleted):

0. where the instant stands: completed by this job (its ``_SUCCESS`` summary lists the files
   the instant's statistics name) -> its recorded outcome (a duplicate
   request, or a rerun after a crash between the append and the reply); completed by another
   job, rolled back or aborted -> ``InstantFinishedError`` (for a rolled-back instant the job's
   abort is finished first: its files are garbage);
1. job commit of exactly the accepted task attempts (resumable: renames already done are
   recognised; a job committed before returns its recorded result);
2. the write statistics may name only files the job commit placed, with their sizes
   (``StatisticsMismatchError``: ``completed`` must never name a file that is not there);
3. ``completed`` with the statistics, under the table lock, after the heartbeat check, the
   conflict rules, the ``once`` rule (when the statistics name a streaming micro-batch,
   ``CommitStats.batch``: no other completed instant carries its query id and batch id) and
   the caller's ``validate``; re-checked after every rebase;
4. a lost reply (``CommitStateUnknownError``): the log decides
   (``lakewarden.table.completion.complete``, the step every action shares). This job's
   ``completed`` on the log is success; otherwise the error is raised and nothing is deleted
   (the instant stays pending; only a ``rolled_back`` entry makes its files garbage);
5. any other failure: ``abandon``: append ``rolled_back`` first (it makes the instant
   uncommittable, and is refused if it completed), only then abort the job (every file it
   placed or staged is deleted), and raise the original error;
6. an ingestion that completed requests the cancellation of the pending cancellable plans it
   overtook (RFC-79 goal A: ``lakewarden.table.cancel.cancel_overtaken_plans``; best effort).

``CommitProgress.stage`` names the step that was running (or, in step 1, the committer's
stage); ``abandon`` records it, the job id and the error's type as typed fields of the
``rolled_back`` payload (``InstantState.failed_stage``, ``failed_job_id``, ``error_type``), so
whoever reads the timeline later knows where a commit failed without parsing the reason.

A store that can neither rename nor hold back multipart uploads (the in-memory test store)
has no private staging: its writer puts files at their final keys (invisible until
``completed`` names them) and passes ``committer=None``; steps 1, 2 and the job abort are then
skipped and the caller deletes its files after the rollback.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import lakewarden.faults as faults
from lakewarden.commit import (
    CommittedFile,
    JobCommitResult,
    ManifestCommitter,
    RetryableStageFailedError,
    StageFailedError,
)
from lakewarden.errors import CommitStateUnknownError, NonRetryableError
from lakewarden.settings import CommitterSettings
from lakewarden.table.abandon import abandon as abandon
from lakewarden.table.cancel import cancel_overtaken_plans
from lakewarden.table.completion import complete
from lakewarden.table.instant import INGESTION_ACTIONS, Transition
from lakewarden.table.stats import CommitStats, MicroBatch
from lakewarden.table.timeline import InstantState, TimelineState
from lakewarden.table.transaction import WriteTransaction

log = logging.getLogger(__name__)

STAGE_CHECK_INSTANT = "check_instant"
STAGE_JOB_COMMIT = "job_commit"
STAGE_CHECK_STATISTICS = "check_statistics"
STAGE_COMPLETE = "complete_instant"
# Stages of a producer before ``commit_instant`` runs, as ``abandon`` records them.
STAGE_WRITE_FILES = "write_files"
STAGE_PREPARE = "prepare_commit"
STAGE_REQUEST_COMMIT = "request_commit"  # asking the job-committer service to run it
STAGE_ABORT = "abort"


class InstantFinishedError(NonRetryableError):
    """The instant is terminal without this job's completion: rolled back, aborted, or
    completed by another job. ``state`` is its state; ``reason``, ``failed_stage`` and
    ``error_type`` what its terminal entry recorded."""

    def __init__(
        self,
        message: str,
        *,
        table: str,
        instant: str,
        state: str,
        reason: str | None,
        failed_stage: str | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init__(message, table=table, instant=instant)
        self.state = state
        self.reason = reason
        self.failed_stage = failed_stage
        self.error_type = error_type


class StatisticsMismatchError(NonRetryableError):
    """The write statistics name a file the job commit did not place, or another size."""


class AlreadyCommittedError(NonRetryableError):
    """Another completed instant carries the same ``once`` values (e.g. this streaming batch)."""

    def __init__(self, message: str, *, instant: str, committed_by: str) -> None:
        super().__init__(message, instant=instant)
        self.committed_by = committed_by


@dataclass(frozen=True)
class CommitRequest:
    """A job commit: the accepted attempts of ``job_id`` (attempt ``job_attempt``), completing
    ``instant`` with ``stats`` (whose ``batch``, if any, no other completed instant may
    carry: the ``once`` rule).

    The one value of a job commit wherever it runs: ``commit_instant`` in this process, a
    ``JobCommitRequest`` event that ``CommitClient`` sends, and what job-committer parses from
    one. Where the table is (``table_uri``, ``table_id``), the lock ``lock_token`` and the
    sender (``producer_id``) matter only to the service and its clients; ``commit_instant``
    is handed the table's transaction instead. ``committer``: the committer options the
    writer set (``JobCommitRequest.committer_options``); each one set wins over the
    job-committer service's own settings; None leaves them alone. Whoever builds the
    ``ManifestCommitter`` applies them; ``commit_instant`` runs the committer it is given.
    """

    instant: str
    job_id: str
    accepted: Sequence[str]
    stats: CommitStats
    description: str = ""
    table_uri: str = ""
    table_id: str = ""
    job_attempt: int = 0
    lock_token: int | None = None
    producer_id: str = ""
    committer: CommitterSettings | None = None


@dataclass(frozen=True)
class InstantCommit:
    """A completed instant: the statistics ``completed`` carries, and how it came about."""

    instant: str
    job_id: str
    stats: CommitStats
    recorded: bool  # it had completed before this call (duplicate request, rerun)
    summary_key: str = ""
    placed: int = 0  # files this call renamed or completed
    resumed: bool = False  # this call finished an interrupted job commit


@dataclass
class CommitProgress:
    """The step ``commit_instant`` is in; entering one is the fault point
    ``commit_instant.step`` (``lakewarden.faults``), so tests can crash a process there."""

    stage: str = STAGE_CHECK_INSTANT

    def enter(self, stage: str) -> None:
        self.stage = stage
        faults.point("commit_instant.step", step=stage)


def commit_instant(
    committer: ManifestCommitter | None,
    txn: WriteTransaction,
    spec: CommitRequest,
    *,
    validate: Callable[[TimelineState], None] | None = None,
    progress: CommitProgress | None = None,
    job_retries: int = 2,
) -> InstantCommit:
    """Steps 0-5 of the module docstring. A job commit that fails on a store fault
    (``RetryableStageFailedError``) is run again, resuming, up to ``job_retries`` times
    before the instant is given up.

    Raises: InstantFinishedError; StageFailedError (job commit; validation errors renamed
    nothing); StatisticsMismatchError; HeartbeatLostError, WriteConflictError subclasses,
    AlreadyCommittedError, whatever ``validate`` raises, IllegalTransitionError,
    LockTimeoutError (all after the rollback of step 5); CommitStateUnknownError (nothing
    rolled back or deleted)."""
    progress = progress if progress is not None else CommitProgress()
    progress.enter(STAGE_CHECK_INSTANT)
    recorded = recorded_commit(txn, spec.job_id, committer)  # 0.
    if recorded is not None:
        return recorded
    try:
        done = _commit(committer, txn, spec, validate, progress, job_retries)
    except CommitStateUnknownError:
        raise
    except Exception as err:  # a crash (KeyboardInterrupt, SIGKILL) leaves it to be resumed
        stage = failed_stage(err, progress)
        abandon(committer, txn, err, stage=stage, job_id=spec.job_id)  # 5.
        raise
    if txn.action in INGESTION_ACTIONS:  # 6.
        cancel_overtaken_plans(
            txn.timeline, txn.coordinator, txn.table_id, txn.instant, actor=txn.actor
        )
    return done


def _commit(
    committer: ManifestCommitter | None,
    txn: WriteTransaction,
    spec: CommitRequest,
    validate: Callable[[TimelineState], None] | None,
    progress: CommitProgress,
    job_retries: int,
) -> InstantCommit:
    placed, resumed, summary_key = 0, False, ""
    if committer is not None:
        progress.enter(STAGE_JOB_COMMIT)
        description = spec.description or f"instant {spec.instant}"
        job = _job_commit(committer, spec.accepted, description, job_retries)  # 1.
        progress.enter(STAGE_CHECK_STATISTICS)
        check_statistics(spec.stats, job.files, instant=spec.instant, table=txn.table_id)  # 2.
        placed, resumed, summary_key = job.placed, job.resumed, job.summary_key
    stats = spec.stats
    rules = _rules(txn.instant, stats.batch, validate)
    progress.enter(STAGE_COMPLETE)
    # 3., 4.: the one completion protocol; only this job's completion counts (same_work=False).
    complete(txn, stats, validate=rules, same_work=False)
    return InstantCommit(
        spec.instant, spec.job_id, stats, False, summary_key, placed=placed, resumed=resumed
    )


def _job_commit(
    committer: ManifestCommitter, accepted: Sequence[str], description: str, retries: int
) -> JobCommitResult:
    for attempt in range(retries + 1):
        try:
            return committer.commit_job(accepted, description=description)
        except RetryableStageFailedError as err:
            if attempt == retries:
                raise
            log.warning("job %s: %s; resuming it", committer.job_id, err)
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def recorded_commit(
    txn: WriteTransaction, job_id: str, committer: ManifestCommitter | None = None
) -> InstantCommit | None:
    """The instant's recorded outcome for ``job_id``: its ``InstantCommit`` if this job
    completed it, None while it is pending.

    Raises: InstantFinishedError (terminal otherwise; a rolled-back instant's job abort is
    finished first when ``committer`` is given)."""
    mine = txn.status()
    if mine is None or mine.is_pending:
        return None
    if mine.state is Transition.COMPLETED and mine.commit is not None:
        if committer is None or _committed_by(committer, mine.commit):
            summary = committer.layout.summary_key if committer is not None else ""
            return InstantCommit(mine.instant, job_id, mine.commit, True, summary)
    elif committer is not None and mine.state is Transition.ROLLED_BACK:
        _finish_abort(committer, mine)
    raise _finished(txn.table_id, mine, job_id)


def _committed_by(committer: ManifestCommitter, stats: CommitStats) -> bool:
    """Whether the job committed the files ``stats`` names (its summary says so)."""
    summary = committer.summary()
    if summary is None or summary.state != "COMMITTED":
        return False
    placed = {key: size for files in summary.committed_files.values() for key, size in files}
    return all(placed.get(s.path) == s.size_bytes for s in stats.write_stats if not s.is_log)


def _finished(table_id: str, mine: InstantState, job_id: str) -> InstantFinishedError:
    if mine.state is Transition.COMPLETED:
        what = "was completed by another job"
    else:
        what = f"is {mine.state}: {mine.reason or 'no reason recorded'}"
    return InstantFinishedError(
        f"instant {mine.instant} of table {table_id} {what}; job {job_id} cannot commit it. "
        "Help: read the timeline (Table.timeline()) for what happened; a new write needs a "
        "new instant.",
        table=table_id,
        instant=mine.instant,
        state=str(mine.state),
        reason=mine.reason,
        failed_stage=mine.failed_stage,
        error_type=mine.error_type,
    )


def _finish_abort(committer: ManifestCommitter, mine: InstantState) -> None:
    try:
        committer.abort_job(force=True, reason=mine.reason or "instant rolled back")
    except Exception as err:  # the cleaner finishes it; the answer is the same
        log.warning("instant %s is rolled back, but aborting its job failed: %s", mine.instant, err)


def check_statistics(
    stats: CommitStats, files: Sequence[CommittedFile], *, instant: str, table: str
) -> None:
    """Every file the statistics name is a committed file of that size. Log file blocks
    (merge-on-read) are appended in place by their attempt, not placed by the job commit;
    readers check them against the statistics (``lakewarden.logfile.select``).

    Raises: StatisticsMismatchError."""
    placed = {f.key: f.size for f in files}
    for stat in stats.write_stats:
        if stat.is_log:
            continue
        size = placed.get(stat.path)
        if size is None or size != stat.size_bytes:
            found = "no committed file" if size is None else f"a committed file of {size} bytes"
            raise StatisticsMismatchError(
                f"instant {instant}: the write statistics name {stat.path} "
                f"({stat.size_bytes} bytes), but the job commit placed {found} there. "
                "Help: the statistics must come from the accepted task attempts' own files; "
                "nothing was completed.",
                table=table,
                instant=instant,
            )


def _rules(
    instant: str, batch: MicroBatch | None, validate: Callable[[TimelineState], None] | None
) -> Callable[[TimelineState], None] | None:
    if batch is None and validate is None:
        return None

    def rules(state: TimelineState) -> None:
        if batch is not None:
            check_once(state, instant, batch)
        if validate is not None:
            validate(state)

    return rules


def check_once(state: TimelineState, instant: str, batch: MicroBatch) -> None:
    """Raises: AlreadyCommittedError when another completed instant carries ``batch``'s query
    id and batch id (any run of the query)."""
    wanted = (batch.query_id, batch.batch_id)
    for other in state.completed():
        done = other.commit.batch if other.commit is not None else None
        if (
            other.instant != instant
            and done is not None
            and (done.query_id, done.batch_id) == wanted
        ):
            raise AlreadyCommittedError(
                f"instant {other.instant} completed micro-batch {batch.batch_id} of streaming "
                f"query {batch.query_id} already; instant {instant} must not commit it again. "
                "Help: nothing is lost: the batch's rows are in the table once; this "
                "instant is rolled back.",
                instant=instant,
                committed_by=other.instant,
            )


def failed_stage(err: BaseException, progress: CommitProgress) -> str:
    """The committer's stage for a job commit failure, else the step that was running."""
    if isinstance(err, StageFailedError):
        return err.stage
    return progress.stage
