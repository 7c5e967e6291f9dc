"""The blocking part of a job commit: open the table, run ``commit_instant``, say how it ended.

``CommitWorker.run(job)`` runs on the commit lane's thread (never the loop's):

1. open the table from ``job.table_uri`` (a ``TableHandle`` with the service's coordinator,
   as every writer opens one, but which does not publish the Delta version when the instant
   completes: step 6 does, after the answer) and check that it is the table the event is
   keyed by;
2. resume the instant's write transaction (``WriteTransaction.resume``) and check that its
   ``requested`` plan, when it names a job, names this one;
3. ``commit_instant`` with the job's committer: the same function ``Table.write`` and the
   in-process Spark commit run (job commit, conflict-checked ``completed`` followed by the
   read manifest, or rollback then job abort). Its stages' threads are the service's
   (``pools``) when the job asks for the service's thread count. A request redelivered after
   a crash resumes (the committer recognises the renames already done); a request for a
   finished instant gets its recorded outcome;
4. a retryable failure (lock timeout, a store fault, an unknown append outcome) that left the
   instant pending is tried again, up to ``attempts`` times; then it is reported;
5. the outcome, with the timeline entry the service appended (to publish) and, when the
   instant is completed and the table publishes, its Delta publisher.

``CommitWorker.publish(outcome)``, once the handler has answered (same lane):

6. publish the Delta versions the table lacks, best effort (a failure is logged: the
   publisher service, the next commit's publish or a ``sync`` catches up, since a sync writes
   every missing version in order). Not at all with ``LAKEWARDEN_PUBLISH_ON_COMMIT=false``.

``close`` stops the service's committer threads when the service stops.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Mapping

from lakewarden.api.connection import Connection
from lakewarden.commit import (
    AnnouncedManifest,
    CommitError,
    CommitterOptions,
    FileEntry,
    JobLayout,
    ManifestCommitter,
    ManifestHeader,
)
from lakewarden.commit.layout import is_reserved
from lakewarden.commit.manifest import parse_manifest
from lakewarden.commit.stages.load import FROM_EVENTS, FROM_STORAGE
from lakewarden.errors import CommitStateUnknownError, LakewardenError, RetryableError
from lakewarden.handle import TableHandle
from lakewarden.publish import publisher_on_commit
from lakewarden.settings import Settings
from lakewarden.storage import NotFoundError, Storage, open_storage
from lakewarden.table.config import load_config
from lakewarden.table.instant import Transition
from lakewarden.table.job_commit import (
    STAGE_CHECK_INSTANT,
    CommitProgress,
    CommitRequest,
    InstantFinishedError,
    commit_instant,
    failed_stage,
)
from lakewarden.table.timeline import Timeline, TimelineEntry
from lakewarden.table.transaction import WriteTransaction
from lakewarden_services.job_committer.pools import CommitPools
from lakewarden_services.job_committer.protocol import ManifestNotice, Outcome

log = logging.getLogger(__name__)

ACTOR_PREFIX = "job-committer@"
STAGE_OPEN_TABLE = "open_table"


class RequestRefusedError(LakewardenError):
    """The request does not fit the table it names (another table id, another job)."""


def actor() -> str:
    return f"{ACTOR_PREFIX}{socket.gethostname()}:{os.getpid()}"


class CommitWorker:
    """Runs job commits; one per service process (thread-safe: it holds no per-job state).
    ``connection`` gives the service's coordinator (made on the first commit); the committer
    threads it keeps (``pools``) are stopped by ``close``."""

    def __init__(
        self,
        settings: Settings,
        connection: Callable[[], Connection],
        *,
        attempts: int = 3,
        retry_delay_s: float = 1.0,
    ) -> None:
        self.settings = settings
        self.connection = connection
        self.attempts = attempts
        self.retry_delay_s = retry_delay_s
        self.actor = actor()
        self.pools = CommitPools(CommitterOptions.from_settings(settings.committer))

    def run(
        self, job: CommitRequest, announced: Mapping[str, AnnouncedManifest] | None = None
    ) -> Outcome:
        """Steps 1-5 of the module docstring; never raises for a failed commit. ``announced``:
        the accepted attempts' manifests held from their TaskManifest events (the job commit
        reads storage for the others)."""
        progress = CommitProgress(stage=STAGE_OPEN_TABLE)
        try:
            table = self._open(job)  # 1.
        except Exception as err:
            return _failed(err, STAGE_OPEN_TABLE)
        timeline = table.timeline_log
        for attempt in range(1, self.attempts + 1):
            try:
                return self._commit(job, table, progress, announced or {})
            except InstantFinishedError as err:
                return _finished(err, timeline, job)
            except (RetryableError, CommitStateUnknownError) as err:
                if attempt == self.attempts or not _pending(timeline, job.instant):
                    return self._failed(err, progress, timeline, job)
                log.warning(
                    "job commit failed (attempt %d of %d), retrying: %s",
                    attempt,
                    self.attempts,
                    err,
                    extra={"job_id": job.job_id, "instant": job.instant},
                )
                time.sleep(self.retry_delay_s * attempt)  # the commit lane's thread
            except Exception as err:
                return self._failed(err, progress, timeline, job)
        raise AssertionError("unreachable")

    def publish(self, outcome: Outcome) -> None:
        """Step 6 of the module docstring: never raises (the request is answered already; a
        failure here must not dead-letter it)."""
        if outcome.publisher is None:
            return
        try:
            outcome.publisher.sync()
        except Exception as err:  # noqa: BLE001 - best effort: a sync catches up later
            log.warning(
                "table %s: publishing the Delta log failed (%s)",
                outcome.publisher.config.name,
                err,
            )

    def close(self) -> None:
        """Stop the committer threads (the service stopped: no commit runs)."""
        self.pools.close()

    def _open(self, job: CommitRequest) -> TableHandle:
        connection = self.connection()
        storage = open_storage(job.table_uri, self.settings)
        config = load_config(storage)
        if config.table_id != job.table_id:
            raise RequestRefusedError(
                f"the table at {job.table_uri} has id {config.table_id}, but the request is "
                f"for table {job.table_id}; nothing was done.",
                table=job.table_id,
                instant=job.instant,
            )
        # The read manifest is written after ``completed``, before the answer (a Spark read
        # right after it plans from the manifest); the Delta version after the answer (6.).
        return TableHandle(
            storage,
            config,
            coordinator=connection.coordinator,
            actor=self.actor,
            settings=self.settings,
            defer_publish=True,
        )

    def _commit(
        self,
        job: CommitRequest,
        table: TableHandle,
        progress: CommitProgress,
        announced: Mapping[str, AnnouncedManifest],
    ) -> Outcome:
        progress.enter(STAGE_CHECK_INSTANT)
        # The handler publishes the entries the service appends (before the result, and again
        # after a crash), so the coordinator does not announce them a second time.
        txn = WriteTransaction.resume(  # 2.
            table.timeline_log,
            table.coordinator,
            job.table_id,
            job.instant,
            actor=self.actor,
            announce=False,
        )
        _check_plan(txn, job)
        options = CommitterOptions.from_settings(self.settings.committer, job.committer)
        committer = ManifestCommitter(
            table.storage,
            job.job_id,
            job_attempt=job.job_attempt,
            options=options,
            announced=announced,
            pool=self.pools.for_job(options, table.storage),
        )
        done = commit_instant(committer, txn, job, progress=progress)  # 3.
        return Outcome(
            status="committed",
            stats=done.stats,
            recorded=done.recorded,
            summary_key=done.summary_key or committer.layout.summary_key,
            entries=_appended(table.timeline_log, job.instant),
            placed=done.placed,
            resumed=done.resumed,
            manifests_from_events=committer.statistics.counter(FROM_EVENTS),
            manifests_from_storage=committer.statistics.counter(FROM_STORAGE),
            publisher=publisher_on_commit(table.storage, table.config, table.timeline_log),
        )

    def _failed(
        self, err: Exception, progress: CommitProgress, timeline: Timeline, job: CommitRequest
    ) -> Outcome:
        outcome = _failed(err, failed_stage(err, progress))
        entries = _appended(timeline, job.instant)
        return Outcome(
            status=outcome.status,
            reason=outcome.reason,
            failed_stage=outcome.failed_stage,
            error_type=outcome.error_type,
            entries=entries,
        )


def _check_plan(txn: WriteTransaction, job: CommitRequest) -> None:
    """A ``requested`` plan that names a job (a ``JobPlan``) must name this one: a request
    cannot commit one job's files as another job's instant."""
    mine = txn.status()
    plan = mine.job_plan if mine is not None else None
    named = plan.job_id if plan is not None else None
    if named is not None and named != job.job_id:
        raise RequestRefusedError(
            f"instant {job.instant} was requested for job {named}, not job {job.job_id}; "
            "nothing was done.",
            table=job.table_id,
            instant=job.instant,
        )


def _pending(timeline: Timeline, instant: str) -> bool:
    mine = timeline.load().get(instant)
    return mine is not None and mine.is_pending


def _appended(timeline: Timeline, instant: str) -> tuple[TimelineEntry, ...]:
    """The instant's terminal entry, when a job-committer appended it (publish it again after
    a crash: consumers of the timeline topic deduplicate by seq)."""
    try:
        mine = timeline.load().get(instant)
        if mine is None or mine.state not in (Transition.COMPLETED, Transition.ROLLED_BACK):
            return ()
        entry = next(timeline.entries(after_seq=mine.last_seq - 1), None)
    except Exception as err:  # publishing is an audit trail; the answer matters more
        log.warning("cannot read the entry to publish for %s: %s", instant, err)
        return ()
    if entry is None or entry.seq != mine.last_seq or not entry.actor.startswith(ACTOR_PREFIX):
        return ()
    return (entry,)


def _failed(err: BaseException, stage: str) -> Outcome:
    return Outcome(
        status="failed",
        reason=f"{type(err).__name__}: {err}",
        failed_stage=stage,
        error_type=type(err).__name__,
    )


def _finished(err: InstantFinishedError, timeline: Timeline, job: CommitRequest) -> Outcome:
    """A request for an instant that ended without this job's completion: the recorded
    failure when it was rolled back (by this job's commit, or by anyone: the stage and error
    type are fields of its ``rolled_back`` entry), else a refusal."""
    recorded = err.state == str(Transition.ROLLED_BACK)
    reason = err.reason if recorded and err.reason else f"{type(err).__name__}: {err}"
    stage = err.failed_stage if recorded else None
    error_type = err.error_type if recorded else None
    return Outcome(
        status="failed",
        reason=reason,
        failed_stage=stage or STAGE_CHECK_INSTANT,
        error_type=error_type or type(err).__name__,
        recorded=recorded,
        entries=_appended(timeline, job.instant),
    )


def check_manifest(storage: Storage, notice: ManifestNotice) -> tuple[str, str]:
    """Early validation of an announced manifest read from storage: ``(status, detail)``,
    status one of ``valid``, ``missing`` (not saved, or cleaned up after its job finished),
    ``invalid`` (malformed, another attempt's, a destination outside the table's data area)
    or ``mismatch`` (file count or bytes differ from the event). The job commit validates
    again, fully; this only makes a bad attempt visible early."""
    layout = JobLayout(notice.job_id)
    expected_name = f"{notice.attempt}-manifest.json"
    path = notice.manifest_path
    if not path.startswith(layout.job_dir) or path.rpartition("/")[2] != expected_name:
        return "invalid", f"{path} is not where attempt {notice.attempt} saves its manifest"
    try:
        header, entries = parse_manifest(storage.read(path), key=path)
    except NotFoundError:
        return "missing", f"no manifest at {path}"
    except CommitError as err:
        return "invalid", str(err)
    return check_parsed(header, entries, notice)


def check_announced(notice: ManifestNotice, manifest: AnnouncedManifest) -> tuple[str, str]:
    """``check_manifest`` for the manifest the event carries (no storage read: the job
    commit shows that the saved manifest is the same bytes before it uses them)."""
    layout = JobLayout(notice.job_id)
    path = notice.manifest_path
    if not path.startswith(layout.job_dir) or path != manifest.key:
        return "invalid", f"{path} is not where attempt {notice.attempt} saves its manifest"
    try:
        header, entries = parse_manifest(manifest.data, key=path)
    except CommitError as err:
        return "invalid", str(err)
    return check_parsed(header, entries, notice)


def check_parsed(
    header: ManifestHeader, entries: list[FileEntry], notice: ManifestNotice
) -> tuple[str, str]:
    path = notice.manifest_path
    if header.task_attempt_id != str(notice.attempt):
        return "invalid", f"{path} is the manifest of {header.task_attempt_id}"
    for entry in entries:
        dst = entry.dst
        if dst.startswith("/") or ".." in dst.split("/") or is_reserved(dst):
            return "invalid", f"destination {dst!r} is outside the table's data area"
    total = sum(e.size for e in entries)
    if len(entries) != notice.file_count or total != notice.total_bytes:
        return "mismatch", (
            f"{path} lists {len(entries)} files of {total} bytes; the event said "
            f"{notice.file_count} files of {notice.total_bytes} bytes"
        )
    return "valid", f"{len(entries)} files, {total} bytes"
