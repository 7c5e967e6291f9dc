"""The driver's side of a Spark write: open the instant, commit or abort it.

One write is one instant and one manifest-committer job:

``open_write`` (before any task runs):
  1. set up the committer job (``_temporary/manifest_<jobId>/``);
  2. take the table lock and append ``requested``; its plan names the job (``JobPlan.job_id``);
     if this fails, the job is aborted.

``commit_write`` (Spark's ``commit(messages)``, with the messages of the accepted attempts):
  1. collect the write statistics of the accepted attempts (one file per file group);
  2. plain-format writes: append ``inflight`` with the workload profile (the file groups the
     attempts wrote; every file group for an overwrite). The helper appended it before the
     tasks ran;
  3. job commit of exactly the accepted attempts, then ``completed`` with the statistics after
     the conflict rules (and, for a streaming micro-batch, the rule that no instant completed
     that batch already): ``lakewarden.table.job_commit.commit_instant``. Where it runs is
     decided as for ``Table.write`` (``KafkaSettings.commits_by_service``): without Kafka, or
     with ``kafka.job_commits = "embedded"``, here in the driver; else the driver sends the
     job-committer a ``JobCommitRequest`` (``lakewarden.clients.CommitClient``) and waits up
     to ``kafka.job_commit_timeout_s`` for its answer: the service runs the very same
     function. Either way, the files of every other attempt are
     deleted by the job's cleanup;
  4. on any failure: ``lakewarden.table.job_commit.abandon`` (``rolled_back`` with the reason
     and the failed stage, making the instant uncommittable, then job abort: no file of it
     stays in the table), and re-raise the error with a note naming the instant (the job
     commit did both already when it failed itself);
     an unknown outcome (``CommitStateUnknownError``: a lost reply, no answer from the
     service in time) is raised as it is, nothing deleted.
  Steps 2-3 run under the instant's heartbeat (the driver keeps beating while it waits).

``abort_write`` (Spark's ``abort(messages)``): the same ``abandon``; nothing at all when the
instant completed (Spark also aborts after a commit that failed late).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage

from lakewarden import handle
from lakewarden.api.connection import shared_connection
from lakewarden.clients import (
    AttemptManifest,
    CommitClient,
    JobCommitFailedError,
)
from lakewarden.clients.committer_presence import CommitterPresence
from lakewarden.commit import CommitterOptions, ManifestCommitter, new_job_id
from lakewarden.errors import CommitStateUnknownError, NonRetryableError
from lakewarden.settings import Settings
from lakewarden.spark._messages import TaskCommitMessage, accepted_messages
from lakewarden.spark._options import OVERWRITE, WriteSpec, load_settings
from lakewarden.spark._transaction import (
    BatchAlreadyCommittedError,
    BatchKey,
    SparkTransaction,
    completed_batch,
)
from lakewarden.storage import Storage, open_storage
from lakewarden.table.config import TableConfig, load_config
from lakewarden.table.coordinator import Coordinator
from lakewarden.table.job_commit import (
    STAGE_ABORT,
    STAGE_PREPARE,
    STAGE_REQUEST_COMMIT,
    AlreadyCommittedError,
    CommitRequest,
    commit_instant,
)
from lakewarden.table.job_commit import abandon as abandon_instant
from lakewarden.table.mor import ingestion_action
from lakewarden.table.plans import JobPlan
from lakewarden.table.snapshot import snapshot_as_of_request
from lakewarden.table.stats import CommitStats, FileGroupId, WorkloadProfile
from lakewarden.table.timeline import Timeline
from lakewarden.table.writer import CommitResult

log = logging.getLogger("lakewarden.spark")


class DuplicateFileGroupError(NonRetryableError):
    """Two accepted attempts wrote one file group (the rows were not clustered by file group)."""


def actor() -> str:
    return f"spark-writer@{socket.gethostname()}:{os.getpid()}"


class TableHandle(handle.TableHandle):
    """The opened table (``lakewarden.handle.TableHandle``) as the driver uses it: built per
    call, nothing of it is pickled; its actor is this driver."""

    def __init__(
        self,
        uri: str,
        storage: Storage,
        config: TableConfig,
        *,
        coordinator: Coordinator,
        settings: Settings,
    ) -> None:
        super().__init__(storage, config, coordinator=coordinator, actor=actor(), settings=settings)
        self._uri = uri

    @classmethod
    def open(cls, uri: str, settings_json: str | None) -> TableHandle:
        """Raises: NotATableError, InvalidOptionError."""
        settings = load_settings(settings_json)
        storage = open_storage(uri, settings)
        config = load_config(storage)
        # Spark builds the data source from options, so nobody can hand the driver a
        # coordinator: it takes the process's shared one for these settings (the factory).
        coordinator = shared_connection(settings).coordinator
        return cls(uri, storage, config, coordinator=coordinator, settings=settings)

    @property
    def uri(self) -> str:
        """The URI as the options gave it: the executors open it, and the error table's
        location is derived from it."""
        return self._uri

    @property
    def timeline(self) -> Timeline:
        return self.timeline_log

    def transaction(self, spec: WriteSpec) -> SparkTransaction:
        """A handle on the instant ``spec`` opened (in this or another process)."""
        return SparkTransaction(
            self.timeline,
            self.coordinator,
            self.config.table_id,
            instant=spec.instant,
            action=ingestion_action(self.config),
            operation=spec.operation,
            actor=actor(),
        )


@dataclass(frozen=True)
class OpenedBatch:
    """A micro-batch's instant: ``opened`` when this call appended its ``requested`` (its job
    staging is then this instant's), False when an earlier attempt of the batch had."""

    instant: str
    job_id: str
    opened: bool


def open_batch(table: TableHandle, key: BatchKey, operation: str) -> OpenedBatch:
    """The pending instant of micro-batch ``key``, or a new ``requested`` one with a new job's
    staging set up (``SparkTransaction.begin_batch``). A staging this call set up but does not
    use (the batch had an instant already, or opening it failed) is aborted here.

    Raises: BatchAlreadyCommittedError, LockTimeoutError, ConcurrentAppendError,
    CommitStateUnknownError."""
    committer = ManifestCommitter(table.storage, new_job_id())
    committer.setup_job()
    try:
        instant, job_id = SparkTransaction.begin_batch(
            table.timeline,
            table.coordinator,
            table.config.table_id,
            key=key,
            job_id=committer.job_id,
            operation=operation,
            actor=actor(),
            action=ingestion_action(table.config),
        )
    except BatchAlreadyCommittedError:
        committer.abort_job(reason="the micro-batch was committed already")
        raise
    except BaseException:
        committer.abort_job(reason=f"micro-batch {key.batch_id}: requested failed")
        raise
    opened = job_id == committer.job_id
    if not opened:  # an earlier attempt opened the batch's instant
        committer.abort_job(reason=f"micro-batch {key.batch_id} has job {job_id}")
    return OpenedBatch(instant, job_id, opened)


def open_write(
    table: TableHandle,
    operation: str,
    *,
    settings_json: str | None,
    merge: bool = False,
    profiled: bool = False,
    test_hooks: dict[str, str] | None = None,
) -> tuple[WriteSpec, SparkTransaction]:
    """Steps 1-2 of the module docstring. Raises: LockTimeoutError, StageFailedError, ..."""
    job_id = new_job_id()
    committer = ManifestCommitter(table.storage, job_id)
    committer.setup_job()  # 1.
    try:
        txn = SparkTransaction.begin(  # 2.
            table.timeline,
            table.coordinator,
            table.config.table_id,
            operation=operation,
            actor=actor(),
            plan=JobPlan(job_id=job_id),
            action=ingestion_action(table.config),
        )
    except BaseException as err:
        reason = f"requested failed: {err!r}"
        _note(err, lambda: committer.abort_job(reason=reason))
        raise
    spec = WriteSpec(
        uri=table.uri,
        instant=txn.instant,
        job_id=job_id,
        operation=operation,
        settings_json=settings_json,
        merge=merge,
        profiled=profiled,
        test_hooks=dict(test_hooks or {}),
    )
    assert isinstance(txn, SparkTransaction)
    return spec, txn


def commit_write(
    spec: WriteSpec,
    messages: Sequence[WriterCommitMessage | None],
    *,
    batch: BatchKey | None = None,
    table: TableHandle | None = None,
    client: CommitClient | None = None,
    beating: bool = False,
) -> CommitResult:
    """Steps 1-4 of the module docstring. ``table`` and ``client`` are what a streaming query
    keeps between micro-batches (``_stream_session``); without them both are made for this
    call. ``beating``: the caller holds the instant's heartbeat around this call (a
    micro-batch beats once from its write to its commit), so no second one is started.

    Raises: OverlappingCommitConflict, PendingPlanConflict, BatchAlreadyCommittedError,
    DuplicateFileGroupError, StageFailedError, JobCommitFailedError (the service failed it),
    CommitStateUnknownError (the outcome could not be settled; nothing was deleted)."""
    table = table if table is not None else TableHandle.open(spec.uri, spec.settings_json)
    txn = table.transaction(spec)
    settings = load_settings(spec.settings_json)
    stage = STAGE_PREPARE  # the driver's own step; commit_instant records its own stages
    with nullcontext() if beating else txn.heartbeat():
        try:
            accepted = accepted_messages(messages, instant=spec.instant, job_id=spec.job_id)
            stats = commit_stats(table, spec, accepted, batch)  # 1.
            if not spec.profiled:  # 2.
                txn.inflight(workload(spec, stats))
            job = CommitRequest(
                spec.instant,
                spec.job_id,
                tuple(m.attempt_id for m in accepted),
                stats,
                description=f"instant {spec.instant}",
            )
            if settings.kafka.commits_by_service:  # 3.
                stage = STAGE_REQUEST_COMMIT
                done = _commit_by_service(table, spec, job, settings, accepted, client)
            else:
                committer = ManifestCommitter(
                    table.storage,
                    spec.job_id,
                    options=CommitterOptions.from_settings(settings.committer, spec.committer),
                )
                done = commit_instant(committer, txn, job).stats
            return CommitResult(spec.instant, done)
        except CommitStateUnknownError as err:
            err.add_note(_where(spec, "outcome unknown: reconcile with the timeline"))
            raise
        except BaseException as err:
            abandon(table, spec, err, stage=stage)  # 4.
            already = _already_committed(table, err, spec, batch)
            if already is not None:
                raise already from err
            raise


def _commit_by_service(
    table: TableHandle,
    spec: WriteSpec,
    job: CommitRequest,
    settings: Settings,
    accepted: Sequence[TaskCommitMessage],
    client: CommitClient | None = None,
) -> CommitStats:
    """Step 3 by the job-committer. The tasks announced their manifests (``_announce``); the
    driver announces those that could not (delivery failed, or a task that does not publish).
    Sent through ``client`` (kept open by its owner: a streaming query's session) or a client
    made and closed here; a one-shot write first checks that a job-committer runs.
    Raises: JobCommitterUnavailableError (nothing sent), JobCommitFailedError,
    CommitStateUnknownError, CommitServiceUnavailableError."""
    manifests = [
        AttemptManifest(
            m.attempt_id,
            m.manifest_key,
            len(m.write_stats),
            sum(s.size_bytes for s in m.write_stats),
        )
        for m in accepted
        if not m.manifest_published
    ]
    request = replace(
        job,
        table_uri=table.storage.uri,  # absolute: the service runs elsewhere
        table_id=table.config.table_id,
        committer=settings.committer.merged(spec.committer),
    )
    timeout_s = settings.kafka.job_commit_timeout_s
    if client is not None:
        return client.commit(request, timeout_s=timeout_s, manifests=manifests).stats
    # As Table.write does: with no job-committer running the request would wait in Kafka and
    # the driver for its timeout; fail now, named, with nothing sent (step 4 rolls back).
    presence = CommitterPresence(settings, wait_s=settings.kafka.job_committer_wait_s)
    try:
        presence.require(table=request.table_id, instant=request.instant)
    finally:
        presence.close()
    with CommitClient(settings, producer_id=actor()) as own:
        return own.commit(request, timeout_s=timeout_s, manifests=manifests).stats


def _already_committed(
    table: TableHandle, err: BaseException, spec: WriteSpec, batch: BatchKey | None
) -> BatchAlreadyCommittedError | None:
    """The micro-batch rule's refusal as ``BatchAlreadyCommittedError`` (what the stream
    writer expects), whether the driver or the service ran the commit. The instant that
    committed the batch is read from the timeline, not from the service's message."""
    if batch is None or isinstance(err, BatchAlreadyCommittedError):
        return None
    if isinstance(err, AlreadyCommittedError):
        committed_by = err.committed_by
    elif isinstance(err, JobCommitFailedError) and err.error_type == "AlreadyCommittedError":
        try:
            done = completed_batch(table.timeline.load(), batch)
        except Exception as read_err:  # the refusal stands; only its detail is missing
            err.add_note(f"reading which instant committed the batch failed: {read_err!r}")
            done = None
        committed_by = done.instant if done is not None else "unknown"
    else:
        return None
    return BatchAlreadyCommittedError(
        f"micro-batch {batch.batch_id} of streaming query {batch.query_id} was committed by "
        f"instant {committed_by}; instant {spec.instant} must not commit it again.",
        instant=spec.instant,
        committed_by=committed_by,
    )


def abort_write(spec: WriteSpec, reason: str) -> None:
    """``rolled_back``, then job abort (see ``abandon``). Raises: the first failure."""
    table = TableHandle.open(spec.uri, spec.settings_json)
    failures = abandon(table, spec, reason)
    if failures:
        raise failures[0]


def abandon(
    table: TableHandle, spec: WriteSpec, cause: BaseException | str, *, stage: str = ""
) -> tuple[Exception, ...]:
    """Give the instant up through the one rollback path (``job_commit.abandon``:
    ``rolled_back`` first, refused when the instant completed, then job abort). ``cause`` is
    the error the caller raises (failures become notes on it) or Spark's reason; the failures
    of the steps are returned. A failed rollback leaves the files to the cleaner."""
    if not stage:
        stage = STAGE_PREPARE if isinstance(cause, BaseException) else STAGE_ABORT
    committer = ManifestCommitter(table.storage, spec.job_id)
    done = abandon_instant(committer, table.transaction(spec), cause, stage=stage)
    if done.rolled_back and isinstance(cause, BaseException):
        cause.add_note(_where(spec, "rolled back"))
    return done.failures


def commit_stats(
    table: TableHandle,
    spec: WriteSpec,
    accepted: Sequence[TaskCommitMessage],
    batch: BatchKey | None,
) -> CommitStats:
    """The instant's statistics from the accepted attempts. Raises: DuplicateFileGroupError."""
    stats = [s for m in accepted for s in m.write_stats]
    writers: dict[FileGroupId, str] = {}
    for message in accepted:
        for stat in message.write_stats:
            other = writers.setdefault(stat.file_group, message.attempt_id)
            if other != message.attempt_id:
                raise DuplicateFileGroupError(
                    f"file group {stat.file_group} was written by attempts {other} and "
                    f"{message.attempt_id} of instant {spec.instant}. Help: upserts and "
                    "deletes go through lakewarden.spark.write, which clusters rows by file group.",
                    instant=spec.instant,
                )
    replaced = dict.fromkeys(g for m in accepted for g in m.replaced_file_groups)
    if spec.operation == OVERWRITE:
        replaced.update(dict.fromkeys(_base_groups(table, spec.instant)))
    deleted = sum(m.num_deletes for m in accepted) if spec.operation == "delete" else None
    return CommitStats(
        operation=spec.operation,
        write_stats=tuple(stats),
        replaced_file_groups=tuple(replaced),
        failed_records=sum(m.num_failed_records for m in accepted),
        job_id=spec.job_id,
        batch=batch.micro_batch if batch is not None else None,
        input_records=sum(m.num_input_records for m in accepted),
        deleted_records=deleted,
    )


def workload(spec: WriteSpec, stats: CommitStats) -> WorkloadProfile:
    groups = dict.fromkeys([s.file_group for s in stats.write_stats], None)
    groups.update(dict.fromkeys(stats.replaced_file_groups))
    return WorkloadProfile(
        operation=spec.operation,
        file_groups=tuple(groups),
        replaces_all=spec.operation == OVERWRITE,
    )


def _base_groups(table: TableHandle, instant: str) -> list[FileGroupId]:
    """Every file group of the snapshot the instant builds on (what an overwrite replaces; a
    completion after our ``requested`` conflicts with the overwrite anyway)."""
    state = table.timeline.load()
    return list(snapshot_as_of_request(state, instant, table=table.config.name).slices)


def _where(spec: WriteSpec, what: str) -> str:
    return f"lakewarden: instant {spec.instant} of table {spec.uri} (job {spec.job_id}): {what}"


def _note(err: BaseException, step: Any) -> None:
    try:
        step()
    except Exception as step_err:
        err.add_note(f"cleaning up after the failure: {step_err!r}")
