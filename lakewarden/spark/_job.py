"""The driver's side of a Spark write: open the instant, commit or abort it.

One write is one instant and one manifest-committer job:

``open_write`` (before any task runs):
  1. set up the committer job (``_temporary/manifest_<jobId>/``);
  2. take the table lock and append ``requested``; its plan names the job (``spark.job_id``);
     if this fails, the job is aborted.

``commit_write`` (Spark's ``commit(messages)``, with the messages of the accepted attempts):
  1. collect the write statistics of the accepted attempts (one file per file group);
  2. plain-format writes: append ``inflight`` with the workload profile (the file groups the
     attempts wrote; every file group for an overwrite). The helper appended it before the
     tasks ran;
  3. job commit of exactly the accepted attempts: their files are put in place (renames, or
     completed uploads on S3); every other attempt's files are deleted by the cleanup;
  4. append ``completed`` with the statistics, after the conflict rules (and, for a streaming
     micro-batch, after checking that no instant completed that batch already);
  5. on any failure: append ``rolled_back`` with the reason (making the instant
     uncommittable), abort the job (no file of it stays in the table), and re-raise the error
     with a note naming the instant.
  Steps 2-4 run under the instant's heartbeat.

``abort_write`` (Spark's ``abort(messages)``): ``rolled_back``, then job abort; nothing at
all when the instant completed (Spark also aborts after a commit that failed late).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import WriterCommitMessage

from lakewarden.clients import coordinator_for
from lakewarden.commit import ManifestCommitter, new_job_id
from lakewarden.errors import CommitStateUnknownError, NonRetryableError
from lakewarden.spark._messages import TaskCommitMessage, accepted_messages
from lakewarden.spark._options import OVERWRITE, WriteSpec, load_settings
from lakewarden.spark._transaction import BatchKey, SparkTransaction
from lakewarden.storage import Storage, open_storage
from lakewarden.table.config import TableConfig, load_config
from lakewarden.table.coordinator import Coordinator
from lakewarden.table.instant import Action, Transition
from lakewarden.table.snapshot import build_snapshot
from lakewarden.table.stats import CommitStats, FileGroupId, WorkloadProfile
from lakewarden.table.timeline import Timeline
from lakewarden.table.writer import CommitResult

log = logging.getLogger("lakewarden.spark")


class DuplicateFileGroupError(NonRetryableError):
    """Two accepted attempts wrote one file group (the rows were not clustered by file group)."""


def actor() -> str:
    return f"spark-writer@{socket.gethostname()}:{os.getpid()}"


@dataclass
class TableHandle:
    """A table as the driver uses it (built per call: nothing of it is pickled)."""

    uri: str
    storage: Storage
    config: TableConfig
    timeline: Timeline
    coordinator: Coordinator

    @classmethod
    def open(cls, uri: str, settings_json: str | None) -> TableHandle:
        """Raises: NotATableError, InvalidOptionError."""
        settings = load_settings(settings_json)
        storage = open_storage(uri, settings)
        config = load_config(storage)
        return cls(
            uri, storage, config, Timeline(storage, table=config.name), coordinator_for(settings)
        )

    def transaction(self, spec: WriteSpec) -> SparkTransaction:
        """A handle on the instant ``spec`` opened (in this or another process)."""
        return SparkTransaction(
            self.timeline,
            self.coordinator,
            self.config.table_id,
            instant=spec.instant,
            action=Action.COMMIT,
            operation=spec.operation,
            actor=actor(),
        )


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
            plan={"spark": {"job_id": job_id}},
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
) -> CommitResult:
    """Steps 1-5 of the module docstring.

    Raises: OverlappingCommitConflict, PendingPlanConflict, BatchAlreadyCommittedError,
    DuplicateFileGroupError, StageFailedError, CommitStateUnknownError (the outcome could
    not be settled; nothing was deleted)."""
    table = TableHandle.open(spec.uri, spec.settings_json)
    txn = table.transaction(spec)
    committer = ManifestCommitter(table.storage, spec.job_id)
    with txn.heartbeat():
        try:
            accepted = accepted_messages(messages, instant=spec.instant, job_id=spec.job_id)
            stats = commit_stats(table, spec, accepted, batch)  # 1.
            if not spec.profiled:  # 2.
                txn.inflight(workload(spec, stats))
            committer.commit_job(  # 3.
                [m.attempt_id for m in accepted], description=f"instant {spec.instant}"
            )
            return _complete(table, txn, stats, batch)  # 4.
        except CommitStateUnknownError as err:
            err.add_note(_where(spec, "outcome unknown: reconcile with the timeline"))
            raise
        except BaseException as err:
            abandon(table, spec, f"{type(err).__name__}: {err}", err)  # 5.
            raise


def abort_write(spec: WriteSpec, reason: str) -> None:
    """``rolled_back``, then job abort (see ``abandon``). Raises: the first failure."""
    table = TableHandle.open(spec.uri, spec.settings_json)
    errors: list[BaseException] = []
    abandon(table, spec, reason, None, errors)
    if errors:
        raise errors[0]


def abandon(
    table: TableHandle,
    spec: WriteSpec,
    reason: str,
    err: BaseException | None,
    errors: list[BaseException] | None = None,
) -> None:
    """Give the instant up: first append ``rolled_back``, which makes it uncommittable (and is
    refused if it completed: then nothing is deleted), then abort the job, deleting its files
    even where the job commit had placed them. Spark calls ``abort`` also after a ``commit``
    that completed the instant and then failed, so deleting first would destroy committed
    data. A failure of either step is attached to ``err`` as a note (``err`` is what the
    caller must see) or collected in ``errors``; a failed rollback leaves the files to the
    cleaner."""

    def failed(step_err: BaseException) -> None:
        if err is not None:
            err.add_note(f"while abandoning instant {spec.instant}: {step_err!r}")
        elif errors is not None:
            errors.append(step_err)

    current = table.timeline.load().get(spec.instant)
    if current is not None and current.state is Transition.COMPLETED:
        log.warning("instant %s is completed; not abandoning it (%s)", spec.instant, reason)
        return
    try:
        table.transaction(spec).rollback(reason)
    except Exception as step_err:
        failed(step_err)
        return
    try:
        ManifestCommitter(table.storage, spec.job_id).abort_job(force=True, reason=reason)
    except Exception as step_err:
        failed(step_err)
    if err is not None:
        err.add_note(_where(spec, "rolled back"))


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
    extra = {
        "spark.job_id": spec.job_id,
        "num_input_records": str(sum(m.num_input_records for m in accepted)),
    }
    if spec.operation == "delete":
        extra["num_deletes"] = str(sum(m.num_deletes for m in accepted))
    if batch is not None:
        extra.update(batch.metadata())
    return CommitStats(
        operation=spec.operation,
        write_stats=tuple(stats),
        replaced_file_groups=tuple(replaced),
        failed_records=sum(m.num_failed_records for m in accepted),
        extra_metadata=extra,
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
    mine = state.get(instant)
    assert mine is not None
    before = [s for s in state.completed() if (s.completed_seq or 0) < mine.requested_seq]
    return list(build_snapshot(before).slices)


def _complete(
    table: TableHandle, txn: SparkTransaction, stats: CommitStats, batch: BatchKey | None
) -> CommitResult:
    """Append ``completed``; after a lost reply, the timeline says whether it happened."""
    try:
        txn.complete_once(stats, batch)
    except CommitStateUnknownError:
        mine = table.timeline.load().get(txn.instant)
        if mine is None or mine.state != Transition.COMPLETED:
            raise
        return CommitResult(txn.instant, mine.commit or stats)
    return CommitResult(txn.instant, stats)


def _where(spec: WriteSpec, what: str) -> str:
    return f"lakewarden: instant {spec.instant} of table {spec.uri} (job {spec.job_id}): {what}"


def _note(err: BaseException, step: Any) -> None:
    try:
        step()
    except Exception as step_err:
        err.add_note(f"cleaning up after the failure: {step_err!r}")
