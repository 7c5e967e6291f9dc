"""What one Spark task attempt does (on an executor): write its files privately, commit.

Every attempt is an attempt of the manifest committer (``lakewarden.commit``): its task
attempt id is ``attempt_<jobId>_<partitionId>_<attemptNumber>`` from Spark's ``TaskContext``,
its files go to its private working directory (rename mode) or to pending multipart uploads
(S3), the task commit saves its manifest, and the manifest and the write statistics go back to
the driver as the commit message; with Kafka configured the attempt also announces its manifest
(``_announce``: a ``TaskManifest`` event for job-committer's early checks and audit trail).
Nothing is visible until the driver's job commit places the
files of exactly the accepted attempts and the instant completes; a failed, superseded or
zombie attempt's files stay private and the job's cleanup deletes them.

Two ways to write (``lakewarden.table.bucket`` explains the file groups of a bucket):

- **appends** (``insert``, ``bulk_insert``, overwrite, streaming): rows are conformed and
  routed batch by batch into one Parquet file per bucket touched, in the task's append groups;
  memory stays at one batch plus the open writers' buffers;
- **merges** (``upsert``, ``delete``, helper ``insert``): the helper clustered the rows so that
  each file group is in exactly one task; the task reads the bucket's current slices as of the
  instant's ``requested`` entry and merges them with ``lakewarden.table.merge.merge_bucket``,
  as ``Table.write`` does. On a merge-on-read table an upsert or delete of a bucket whose slice
  has a base file appends one log block per bucket instead (``lakewarden.table.mor``): in place
  on a local filesystem, as a new log file version on S3. A failed, retried or speculative
  attempt's blocks stay in the file but never count: the statistics this attempt returns
  name it, and the driver commits only the accepted attempts' statistics.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from concurrent.futures import wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO

import pyarrow as pa

import lakewarden.faults as faults
from lakewarden.commit import ManifestCommitter, TaskAttempt
from lakewarden.commit._localfs import fsync_file
from lakewarden.spark import _worker_heap
from lakewarden.spark._announce import announce_manifest
from lakewarden.spark._arrow import conform
from lakewarden.spark._messages import TaskCommitMessage
from lakewarden.spark._options import WriteSpec
from lakewarden.storage import Storage, open_storage
from lakewarden.table._pool import shared_pool
from lakewarden.table.bucket import BucketSlices, append_group, route
from lakewarden.table.config import TableConfig, load_config
from lakewarden.table.files import BaseFileName, WriteToken, file_key
from lakewarden.table.merge import Merged, merge_bucket, stamped
from lakewarden.table.mor import log_slice, write_blocks
from lakewarden.table.parquet_options import parquet_writer
from lakewarden.table.snapshot import Snapshot, shared_cache, snapshot_as_of_request
from lakewarden.table.stats import FileGroupId, WriteStat
from lakewarden.table.timeline import Timeline, TimelineState

if TYPE_CHECKING:
    from lakewarden.spark._bad_rows import BadRows

ROW_GROUP_ROWS = 128 * 1024


@dataclass(frozen=True)
class TaskIdentity:
    """Which attempt of which task this is (from Spark's ``TaskContext``)."""

    partition: int
    attempt: int
    stage: int
    # Spark's task attempt id, unique in the application (None outside Spark: tests). It names
    # the committer's attempt, whose directory and manifest must be the attempt's own: Spark
    # numbers the attempts of a retried stage from 0 again (SPARK-24552), and the task commit
    # takes every file in its attempt's directory.
    task_attempt_id: int | None = None

    @property
    def committer_attempt(self) -> int:
        """The attempt number of this attempt in lakewarden's manifest committer."""
        return self.attempt if self.task_attempt_id is None else self.task_attempt_id

    @property
    def write_token(self) -> WriteToken:
        return WriteToken(self.partition, self.stage, self.attempt)

    def describe(self) -> str:
        return f"Spark partition {self.partition} (stage {self.stage}, attempt {self.attempt})"


def current_task() -> TaskIdentity:
    """The running task's identity. Raises: RuntimeError outside a Spark task."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("lakewarden task code runs inside a Spark task only")
    return TaskIdentity(ctx.partitionId(), ctx.attemptNumber(), ctx.stageId(), ctx.taskAttemptId())


@dataclass
class _Task:
    spec: WriteSpec
    identity: TaskIdentity
    storage: Storage
    config: TableConfig
    attempt: TaskAttempt
    # The error table is on: bad rows are published and left out (RFC-20).
    bad_rows: BadRows | None = None

    @classmethod
    def start(cls, spec: WriteSpec, identity: TaskIdentity) -> _Task:
        """Task setup. Raises: StageFailedError (JobNotActiveError: a zombie attempt)."""
        storage = open_storage(spec.uri, spec.settings())
        committer = ManifestCommitter(storage, spec.job_id)
        attempt = committer.task_attempt(identity.partition, identity.committer_attempt)
        attempt.setup()
        task = cls(spec, identity, storage, load_config(storage), attempt)
        # An ingestion that sends its bad records to the error table chose it for bad rows too.
        if spec.settings().error_table.enabled or spec.ingest_errors:
            # Imported here: the error table's modules (its writer, the table layer's reader)
            # cost a fresh worker about 0.3 CPU s, and most writes never need them.
            from lakewarden.spark._bad_rows import BadRows

            task.bad_rows = BadRows(spec, task.config, str(attempt.attempt_id), where=task.where)
        return task

    def conform(self, batch: pa.Table, first_row: int) -> pa.Table:
        """``batch`` in the table's types; bad rows fail the write, or go to the error table.

        Raises: InvalidRecordError, SchemaMismatchError, EventDeliveryError."""
        if self.bad_rows is not None and self.spec.ingest_errors:
            batch = self.bad_rows.divert(batch)
        if self.bad_rows is not None:
            return self.bad_rows.conform(batch, first_row)
        return conform(
            batch, self.config, self.spec.operation, first_row=first_row, where=self.where
        )

    @property
    def where(self) -> str:
        """The attempt and its instant, for error messages."""
        return f"instant {self.spec.instant} of table {self.spec.uri}, {self.identity.describe()}"

    def file_name(self, group: FileGroupId) -> tuple[str, str]:
        """(file name, destination key) of this attempt's base file for ``group``."""
        name = BaseFileName(group.file_id, self.identity.write_token, self.spec.instant).render()
        return name, file_key(group.partition_path, name)

    def open(self, key: str) -> tuple[Any, BinaryIO | None]:
        """A Parquet sink for ``key``: a local path (rename mode) or a file to close."""
        if not self.attempt.upload_mode:
            return self.attempt.local_path(key), None
        sink = self.attempt.create_file(key)
        return sink, sink

    def finish(
        self, stats: list[WriteStat], replaced: list[FileGroupId], counts: dict[str, int]
    ) -> TaskCommitMessage:
        """Task commit, then the message for the driver. The error records are flushed
        first: an attempt whose records are not durable must not be accepted."""
        if self.bad_rows is not None:
            self.bad_rows.flush()
            counts["failed"] = self.bad_rows.count
        result = self.attempt.commit(
            extra_data={"instant": self.spec.instant, "operation": self.spec.operation}
        )
        faults.point(
            "spark.task.after_commit",
            partition=self.identity.partition,
            attempt=self.identity.attempt,
        )
        published = announce_manifest(
            self.spec.settings(),
            table_id=self.config.table_id,
            table_uri=self.storage.uri,
            instant=self.spec.instant,
            job_id=self.spec.job_id,
            task_id=str(result.attempt.task_id),
            attempt_id=str(result.attempt),
            manifest_key=result.manifest_key,
            file_count=result.files,  # what the manifest lists (job-committer checks it)
            total_bytes=result.bytes,
            saved=result.saved,
        )
        return TaskCommitMessage(
            instant=self.spec.instant,
            job_id=self.spec.job_id,
            attempt_id=str(self.attempt.attempt_id),
            manifest_key=result.manifest_key,
            write_stats=tuple(stats),
            replaced_file_groups=tuple(replaced),
            num_input_records=counts.get("input", 0),
            num_deletes=counts.get("deletes", 0),
            num_failed_records=counts.get("failed", 0),
            manifest_published=published,
        )


def write_task(
    spec: WriteSpec, identity: TaskIdentity, batches: Iterable[pa.RecordBatch]
) -> TaskCommitMessage:
    """Write this attempt's rows and commit the task.

    Raises: InvalidRecordError (the first bad row; the job fails), SchemaMismatchError,
    StageFailedError (the committer), InjectedFaultError (tests)."""
    _worker_heap.settle()
    faults.point("spark.task.before_write", partition=identity.partition, attempt=identity.attempt)
    task = _Task.start(spec, identity)
    try:
        if spec.merge:
            stats, replaced, counts = _merge_rows(task, batches)
        else:
            stats, replaced, counts = _append_rows(task, batches)
    except BaseException:
        _discard(task)
        _close(task)
        raise
    try:
        return task.finish(stats, replaced, counts)
    finally:
        _close(task)


def _close(task: _Task) -> None:
    if task.bad_rows is not None:
        task.bad_rows.close()


def _discard(task: _Task) -> None:
    # Best effort: the job's cleanup or abort deletes the attempt's directory anyway.
    try:
        task.attempt.abort()
    except Exception:  # noqa: BLE001 - the write's own error is what the task must report
        pass


# -- appends ----------------------------------------------------------------------------------


class _OpenFile:
    """One data file being written. Appends arrive in slices of Spark's Arrow batches (10k
    rows split by bucket); they are buffered to ``ROW_GROUP_ROWS`` so the file gets a few
    large row groups rather than hundreds of tiny ones (which cost the writer 2x)."""

    def __init__(self, task: _Task, group: FileGroupId) -> None:
        self.group = group
        self.name, self.key = task.file_name(group)
        self.sink, self.handle = task.open(self.key)
        self.writer = parquet_writer(self.sink, task.config.stored_schema)
        self.records = 0
        self._pending: list[pa.Table] = []
        self._pending_rows = 0

    def append(self, rows: pa.Table) -> None:
        self._pending.append(rows)
        self._pending_rows += len(rows)
        self.records += len(rows)
        if self._pending_rows >= ROW_GROUP_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self.writer.write_table(pa.concat_tables(self._pending), ROW_GROUP_ROWS)
        self._pending, self._pending_rows = [], 0

    def close(self) -> int:
        """Write what is buffered and close; returns the file's size."""
        self._flush()
        self.writer.close()
        if self.handle is None:
            # pyarrow wrote the path and does not sync it: the data must be durable before
            # the task commit accepts the file (a completed instant may name it).
            fsync_file(self.sink)
            return os.path.getsize(self.sink)
        size = self.handle.tell()
        self.handle.close()
        return int(size)


def _append_rows(
    task: _Task, batches: Iterable[pa.RecordBatch]
) -> tuple[list[WriteStat], list[FileGroupId], dict[str, int]]:
    """Route each batch into the append groups of this task, one open file per bucket."""
    spec, config = task.spec, task.config
    files: dict[FileGroupId, _OpenFile] = {}
    rows = 0
    try:
        for batch in batches:
            table = task.conform(pa.Table.from_batches([batch]), rows)
            rows += batch.num_rows
            for canonical, part in route(table, config).items():
                group = append_group(canonical, spec.instant, task.identity.partition)
                out = files.get(group) or files.setdefault(group, _OpenFile(task, group))
                stamped_part = stamped(part, spec.instant, config, spec.operation)
                out.append(_file_rows(stamped_part, out.name, config))
        closed = _close_all(list(files.values()))
        stats = [_stat(out, size, spec.instant, inserts=out.records) for out, size in closed]
    finally:
        for out in files.values():
            if out.writer.is_open:
                out.writer.close()
    return stats, [], {"input": rows}


# Threads that close a task's files side by side (``_close_all``).
CLOSE_THREADS = 4


def _close_all(files: Sequence[_OpenFile]) -> list[tuple[_OpenFile, int]]:
    """Close every file of the task (encode what it buffered, sync it): ``(file, size)``.

    A task's rows are buffered until its input ends (``_OpenFile``), so most of the encoding
    and every ``fsync`` come after the last batch, one file per file group, on the task's
    critical path; pyarrow's encoder and ``fsync`` release the GIL, so the files are closed
    on the process's threads side by side. Every close ends before a failure is raised (the
    caller then closes the writers still open)."""
    if len(files) <= 1:
        return [(out, out.close()) for out in files]
    pool = shared_pool(CLOSE_THREADS)
    futures = [pool.submit(out.close) for out in files]
    wait(futures)
    return [(out, future.result()) for out, future in zip(files, futures, strict=True)]


def _file_rows(table: pa.Table, name: str, config: TableConfig) -> pa.Table:
    return config.stored_rows(table, name)


def _stat(
    out: _OpenFile,
    size: int,
    instant: str,
    *,
    inserts: int = 0,
    updates: int = 0,
    deletes: int = 0,
) -> WriteStat:
    return WriteStat(
        file_group=out.group,
        path=out.key,
        base_instant=instant,
        num_records=out.records,
        num_inserts=inserts,
        num_updates=updates,
        num_deletes=deletes,
        size_bytes=size,
    )


# -- merges -----------------------------------------------------------------------------------


def base_snapshot(
    storage: Storage, config: TableConfig, instant: str, state: TimelineState | None = None
) -> Snapshot:
    """The snapshot as of the instant's ``requested`` entry (what the write builds on), from
    the process's cache of the table (``shared_cache``: a Python worker that Spark reuses for
    the tasks and micro-batches after this one applies only what completed since). ``state``:
    the timeline the caller loaded already (default: loaded here).

    Raises: InstantNotOnTimelineError."""
    if state is None:
        state = Timeline(storage, table=config.name).load()
    cache = shared_cache(storage.uri, config.table_id)
    return snapshot_as_of_request(state, instant, table=config.name, cache=cache)


def _merge_rows(
    task: _Task, batches: Iterable[pa.RecordBatch]
) -> tuple[list[WriteStat], list[FileGroupId], dict[str, int]]:
    """Merge every file group of this task's rows with its bucket's current slices."""
    spec, config = task.spec, task.config
    tables, rows = [], 0
    for batch in batches:
        tables.append(task.conform(pa.Table.from_batches([batch]), rows))
        rows += batch.num_rows
    if not rows:
        return [], [], {"input": 0}
    buckets = BucketSlices(base_snapshot(task.storage, config, spec.instant))
    stats: list[WriteStat] = []
    replaced: list[FileGroupId] = []
    deletes = 0
    for group, incoming in route(pa.concat_tables(tables), config).items():
        target = log_slice(config, buckets, group, spec.operation)
        if target is not None:
            stat = write_blocks(
                task.storage,
                target,
                stamped(incoming, spec.instant, config, spec.operation),
                instant=spec.instant,
                attempt=str(task.attempt.attempt_id),
                token=task.identity.write_token,
                delete=spec.operation == "delete",
            )
            deletes += stat.num_deletes
            stats.append(stat)
            faults.point(
                "spark.task.after_log_append",
                partition=task.identity.partition,
                attempt=task.identity.attempt,
            )
            continue
        result = merge_bucket(
            task.storage,
            config,
            group,
            buckets.of(group),
            incoming,
            operation=spec.operation,
            instant=spec.instant,
        )
        deletes += result.merged.deletes
        # The append groups of the bucket are consolidated into the canonical one.
        replaced.extend(result.replaced)
        if result.merged.changed and result.merged.table is not None:
            stats.append(_write_merged(task, group, result.merged))
    return stats, replaced, {"input": rows, "deletes": deletes}


def _write_merged(task: _Task, group: FileGroupId, merged: Merged) -> WriteStat:
    assert merged.table is not None
    out = _OpenFile(task, group)
    try:
        out.append(_file_rows(merged.table, out.name, task.config))
        size = out.close()
    finally:
        if out.writer.is_open:
            out.writer.close()
    return _stat(
        out,
        size,
        task.spec.instant,
        inserts=merged.inserts,
        updates=merged.updates,
        deletes=merged.deletes,
    )
