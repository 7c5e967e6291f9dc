"""The Python writer: ``Table.write(data, operation=...)``.

A write is one transaction on the timeline (``lakewarden.table.transaction``):

1. validate the input against the table schema: every record has a non-null record key and
   non-null values for required fields, else ``InvalidRecordError`` naming the record; nothing
   has touched the table yet, so nothing is committed;
2. route every record to its bucket: partition path (Hive style) x bucket (hash of the record
   key, ``lakewarden.table.bucket``), whose canonical file group has a fixed file id;
3. ``requested``, then load the snapshot as of that entry (the base this write builds on);
4. ``inflight`` with the workload profile: for an insert, the new *append group* of every
   bucket touched (``append_group(canonical, instant, 0)``, ``<bucket:08d>-<instant>-00000``,
   as Spark's inserts and the error table name theirs); for an upsert or delete, per bucket
   touched, its canonical group and the append groups beside it (``BucketSlices.file_groups``);
5. per bucket, write one new base file with a fresh write token into the write's
   manifest-committer task attempt (``lakewarden.commit``: a private file on a local
   filesystem, a pending multipart upload to its final key on S3); the attempt then saves its
   manifest. An **insert** writes only its own rows, as the first base file of the bucket's
   new append group: no base file of the table is read, so its cost is the input's, not the
   table's. An **upsert or delete** reads the current base files of all the bucket's slices
   (canonical and append groups), merges, and writes the canonical group; the append groups
   read are replaced, their records now in the canonical group (``merge_bucket``);
6. job commit and ``completed`` with the write statistics: ``lakewarden.table.job_commit.
   commit_instant``, the same function the Spark driver and the job-committer service run
   (the files are put in place, then ``completed`` is appended after the conflict rules). On a
   conflict (or any failure before completion) the instant is rolled back, then the job is
   aborted (its files are deleted), and the error is re-raised. When the completion's outcome
   is unknown the timeline is re-read: a completed instant is a success; otherwise the write
   is abandoned the same way (the ``rolled_back`` entry settles that it never completes).
   With Kafka configured (``kafka.job_commits == "service"``, the default; ``embedded`` opts
   out), job-committer runs this step (``Coordinator.job_commits``): the attempt's manifest is
   announced, the request sent, the answer awaited; a refusal is rolled back by the service
   (and abandoned here again, idempotently), and an unknown outcome is raised as it is,
   nothing deleted, because the request is durable and may still complete. No job-committer
   running is found before anything is sent (``JobCommitterUnavailableError``) and abandoned
   here like any other failure.
   Steps 4-6 run under the instant's heartbeat.

A store that can neither rename nor hold back uploads (the in-memory test store) has no
private staging: files go straight to their final keys (invisible until ``completed`` names
them) and are deleted after a rollback.

Conflicts follow from the groups each write names. Two inserts into one bucket name different
new append groups, so both commit. An insert and an upsert (or delete) of one bucket also do
not overlap: the merge replaces only the append groups its snapshot had, so an insert that
completes before or after it keeps its group and its rows (insert does not deduplicate: a
key inserted beside an upsert of the same key is stored twice, as with any insert of a key
already present, until an upsert of that key). Two merges of one bucket always overlap in
the canonical group.

Merge semantics are in ``lakewarden.table.merge``; input validation in
``lakewarden.table.write_input``.

Every record has the meta columns ``_lw_commit_time`` (instant that wrote the record),
``_lw_record_key`` (key text), ``_lw_partition_path`` and ``_lw_file_name``, before the user
columns; readers strip them unless asked. A base file stores the first two (at table format
version 1, all four); the last two are its key's, and readers fill them from it
(``TableConfig.stored_schema``, ``TableConfig.with_virtual``).

On a merge-on-read table (``table_type="mor"``) every write is a ``deltacommit``. An insert
writes base files into new append groups as above. An upsert or delete of a bucket whose
only slice is its canonical group with a base file appends one log block to that slice
instead of rewriting it (``lakewarden.table.mor``: appended in place on a local filesystem, a
new log file version on S3; written at the final key, since a block is invisible until the
statistics name its attempt). Buckets with no base file yet or with append groups beside the
canonical one are merged and written as base files as above (the merge reads each slice with
its log blocks merged in).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor, wait
from dataclasses import dataclass, field
from typing import Literal

import pyarrow as pa

from lakewarden.commit import CommitterOptions, ManifestCommitter, TaskAttempt, new_job_id
from lakewarden.commit.stages.task import TaskCommitResult
from lakewarden.errors import CommitStateUnknownError
from lakewarden.storage import Storage
from lakewarden.table._pool import shared_pool
from lakewarden.table.bucket import BucketSlices, Routed, append_group, route_lazily
from lakewarden.table.config import TableConfig
from lakewarden.table.coordinator import Coordinator, JobCommits
from lakewarden.table.files import BaseFileName, WriteToken, file_key
from lakewarden.table.job_commit import STAGE_WRITE_FILES, CommitRequest, abandon, commit_instant
from lakewarden.table.merge import BucketMerge, Merged, merge, merge_bucket, stamped
from lakewarden.table.mor import ingestion_action, log_slice, write_blocks
from lakewarden.table.parquet_options import write_parquet
from lakewarden.table.snapshot import FileSlice, shared_cache, snapshot_as_of_request
from lakewarden.table.stats import CommitStats, FileGroupId, WorkloadProfile, WriteStat
from lakewarden.table.timeline import Timeline
from lakewarden.table.transaction import WriteTransaction
from lakewarden.table.write_input import (
    OPERATIONS,
    BadRecords,
    InvalidRecordError,
    SchemaMismatchError,
    split_bad_records,
    validate_input,
)

# Re-exported: callers import the input errors and the merge helpers from here.
__all__ = [
    "OPERATIONS",
    "BucketMerge",
    "CommitResult",
    "InvalidRecordError",
    "Merged",
    "Operation",
    "SchemaMismatchError",
    "WriteContext",
    "merge",
    "merge_bucket",
    "stamped",
    "validate_input",
    "write",
]

Operation = Literal["insert", "upsert", "delete"]
# -- the write protocol ---------------------------------------------------------------------

# Where a write's bad records go: (instant, job id, task attempt id, the records), called
# before the job commit (``Table.write(bad_records="error-table")`` spools them).
Divert = Callable[[str, str, str, BadRecords], None]


@dataclass(frozen=True)
class CommitResult:
    """What ``Table.write`` returns: the completed instant and its write statistics."""

    instant: str
    stats: CommitStats


@dataclass(frozen=True)
class WriteContext:
    """Everything a write needs about its table."""

    storage: Storage
    config: TableConfig
    timeline: Timeline
    coordinator: Coordinator
    actor: str
    max_threads: int = 8
    # The job commit's options (``Settings.committer``; the service applies its own and these).
    committer: CommitterOptions = field(default_factory=CommitterOptions)


def write(
    ctx: WriteContext, data: pa.Table, operation: Operation, *, divert: Divert | None = None
) -> CommitResult:
    """Write ``data`` as one instant (steps in the module docstring). With ``divert``, the bad
    records are set apart in step 1 instead of failing the write, counted in the statistics'
    ``failed_records``, and handed to ``divert`` once the task attempt is committed, before
    step 6 (a failure there abandons the write like any other).

    Raises: SchemaMismatchError, InvalidRecordError (nothing written); WriteConflictError
    subclasses (files deleted, instant rolled back); CommitStateUnknownError (the outcome could
    not be established; the files stay for the cleaner)."""
    if divert is None:
        data, bad = validate_input(data, ctx.config, operation), None  # 1
    else:
        data, bad = split_bad_records(data, ctx.config, operation)  # 1
    groups = route_lazily(data, ctx.config, shared_pool(ctx.max_threads))  # 2
    action = ingestion_action(ctx.config)
    txn = WriteTransaction.begin(  # 3
        ctx.timeline,
        ctx.coordinator,
        ctx.config.table_id,
        operation=operation,
        actor=ctx.actor,
        action=action,
    )
    job: ManifestCommitter | None = None
    written: list[str] = []
    service = ctx.coordinator.job_commits()
    try:
        job = _job(ctx.storage, txn.instant, ctx.committer, shared_pool(ctx.max_threads))
        with txn.heartbeat():
            state = ctx.timeline.load()
            # The process's cache of the table (``TableHandle.snapshots`` is the same one).
            cache = shared_cache(ctx.storage.uri, ctx.config.table_id)
            base = snapshot_as_of_request(state, txn.instant, table=ctx.config.name, cache=cache)
            buckets = BucketSlices(base)
            touched = _touched(buckets, groups.groups, operation, txn.instant)
            txn.inflight(WorkloadProfile(operation=operation, file_groups=touched))  # 4
            attempt = _attempt(job)
            stats = _write_groups(ctx, txn.instant, buckets, groups, operation, attempt, written)
            committed = _commit_attempt(attempt)  # 5
            accepted = tuple(str(c.attempt) for c in committed)
            if divert is not None and bad:
                stats = stats.model_copy(update={"failed_records": len(bad)})
                attempt_id = accepted[0] if accepted else f"{txn.instant}-direct"
                divert(txn.instant, _job_id(job, txn.instant), attempt_id, bad)
            spec = CommitRequest(txn.instant, _job_id(job, txn.instant), accepted, stats)
            if service is not None and job is not None:  # 6, by job-committer
                done = _by_service(ctx, service, spec, committed)
                return CommitResult(txn.instant, done)
            outcome = commit_instant(job, txn, spec)  # 6
            return CommitResult(txn.instant, outcome.stats)
    except CommitStateUnknownError as err:
        if service is None or job is None:  # in this process: the rollback settles it
            job_id = _job_id(job, txn.instant)
            abandon(job, txn, err, stage=STAGE_WRITE_FILES, job_id=job_id, written=written)
        raise  # by the service: the request is durable and may still complete
    except Exception as err:  # idempotent after commit_instant's own abandon
        job_id = _job_id(job, txn.instant)
        abandon(job, txn, err, stage=STAGE_WRITE_FILES, job_id=job_id, written=written)
        raise


def _job(
    storage: Storage, instant: str, options: CommitterOptions, pool: Executor
) -> ManifestCommitter | None:
    """The write's committer job, set up, its stages on the process's shared ``pool``; None
    on a store without private staging."""
    if not storage.capabilities.private_staging:
        return None
    job = ManifestCommitter(storage, new_job_id(prefix=instant), options=options, pool=pool)
    job.setup_job()
    return job


def _job_id(job: ManifestCommitter | None, instant: str) -> str:
    return job.job_id if job is not None else f"{instant}-direct"


def _attempt(job: ManifestCommitter | None) -> TaskAttempt | None:
    """The write's one task attempt (a write is one process: one attempt for all its files
    keeps the job to one manifest)."""
    if job is None:
        return None
    attempt = job.task_attempt(0)
    attempt.setup()
    return attempt


def _commit_attempt(attempt: TaskAttempt | None) -> tuple[TaskCommitResult, ...]:
    if attempt is None:
        return ()
    return (attempt.commit(),)


def _by_service(
    ctx: WriteContext, service: JobCommits, spec: CommitRequest, tasks: Sequence[TaskCommitResult]
) -> CommitStats:
    """Step 6 by job-committer (``kafka.job_commits == "service"``): the same
    ``commit_instant``, run by the service. Raises: JobCommitterUnavailableError (none runs:
    nothing sent), JobCommitFailedError (rolled back by the service), CommitStateUnknownError,
    CommitServiceUnavailableError."""
    return service.commit_job(
        table_uri=ctx.storage.uri, table_id=ctx.config.table_id, spec=spec, tasks=tasks
    )


def _write_target(
    buckets: BucketSlices, canonical: FileGroupId, operation: str, instant: str
) -> tuple[FileGroupId, Sequence[FileSlice]]:
    """The group a write of ``canonical``'s bucket writes, and the slices it merges in (step
    5): an insert's new append group and none (its rows alone: no base file is read); an
    upsert's or delete's canonical group and every slice of the bucket."""
    if operation == "insert":
        return append_group(canonical, instant, 0), ()
    return canonical, buckets.of(canonical)


def _touched(
    buckets: BucketSlices, canonical: Sequence[FileGroupId], operation: str, instant: str
) -> tuple[FileGroupId, ...]:
    """The workload profile's file groups (step 4): an insert's new append groups
    (``_write_target``), else every group of each bucket a merge reads and replaces
    (``BucketSlices.file_groups``)."""
    if operation == "insert":
        return tuple(_write_target(buckets, c, operation, instant)[0] for c in canonical)
    return tuple(dict.fromkeys(g for c in canonical for g in buckets.file_groups(c)))


def _write_groups(
    ctx: WriteContext,
    instant: str,
    buckets: BucketSlices,
    routed: Routed,
    operation: str,
    attempt: TaskAttempt | None,
    written: list[str],
) -> CommitStats:
    """Gather, merge and encode every bucket and write its new base file into the task
    attempt (an insert's rows into a new append group, a merge into the canonical group), in
    parallel (pyarrow releases the GIL in the gather and the encoding)."""
    groups = routed.groups

    attempt_id = str(attempt.attempt_id) if attempt is not None else f"{instant}-direct"

    def one(task: int) -> tuple[BucketMerge, WriteStat | None]:
        group = groups[task]
        incoming = routed.rows(group)
        target = log_slice(ctx.config, buckets, group, operation)
        if target is not None:
            records = stamped(incoming, instant, ctx.config, operation)
            stat = write_blocks(
                ctx.storage,
                target,
                records,
                instant=instant,
                attempt=attempt_id,
                token=WriteToken(task, 0, 0),
                delete=operation == "delete",
                written=written,  # a failed write deletes its log files as its base files
            )
            return BucketMerge(Merged(None, deletes=stat.num_deletes)), stat
        group, merged_in = _write_target(buckets, group, operation, instant)
        result = merge_bucket(
            ctx.storage,
            ctx.config,
            group,
            merged_in,
            incoming,
            operation=operation,
            instant=instant,
        )
        merged = result.merged
        if not merged.changed or merged.table is None:
            return result, None
        name = BaseFileName(group.file_id, WriteToken(task, 0, 0), instant).render()
        key = file_key(group.partition_path, name)
        data = _file_bytes(ctx.config, name, merged.table)
        if attempt is not None:
            attempt.write_file(key, data)
        else:
            written.append(key)  # before the write: a failed write may still leave an object
            ctx.storage.write_if_absent(key, data)
        stat = WriteStat(
            file_group=group,
            path=key,
            base_instant=instant,
            num_records=len(merged.table),
            num_inserts=merged.inserts,
            num_updates=merged.updates,
            num_deletes=merged.deletes,
            size_bytes=len(data),
        )
        return result, stat

    if len(groups) == 1:
        results = [one(0)]
    else:
        pool = shared_pool(ctx.max_threads)
        futures = [pool.submit(one, task) for task in range(len(groups))]
        wait(futures)  # every bucket ends before a failure is raised and the write abandoned
        results = [future.result() for future in futures]
    return CommitStats(
        operation=operation,
        write_stats=tuple(stat for _, stat in results if stat is not None),
        replaced_file_groups=tuple(g for r, _ in results for g in r.replaced),
        # Deletes that emptied a bucket have no write statistic to count them.
        deleted_records=sum(r.merged.deletes for r, _ in results)
        if operation == "delete"
        else None,
    )


def _file_bytes(config: TableConfig, name: str, table: pa.Table) -> bytes:
    table = config.stored_rows(table, name)
    # An Arrow buffer, not io.BytesIO: the encoder writes its pages without taking the GIL.
    buffer = pa.BufferOutputStream()
    write_parquet(table, buffer)
    data: bytes = buffer.getvalue().to_pybytes()
    return data
