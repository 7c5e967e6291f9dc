"""The Python copy-on-write writer: ``Table.write(data, operation=...)``.

A write is one transaction on the timeline (``lakewarden.table.transaction``):

1. validate the input against the table schema: every record has a non-null record key and
   non-null values for required fields, else ``InvalidRecordError`` naming the record; nothing
   has touched the table yet, so nothing is committed;
2. route every record to its bucket's canonical file group: partition path (Hive style) x
   bucket (hash of the record key, ``lakewarden.table.bucket``); the file id of bucket ``b``
   is fixed, so two writers of one bucket name the same file group and the conflict rules see
   them overlap;
3. ``requested``, then load the snapshot as of that entry (the base this write builds on);
4. ``inflight`` with the workload profile: per bucket touched, its canonical group and the
   append groups Spark appends left beside it (``BucketSlices.file_groups``);
5. per bucket, read the current base files of all its slices (canonical and append groups),
   merge, and write a new base file of the canonical group with a fresh write token into the
   write's manifest-committer task attempt (``lakewarden.commit``: a private file on a local
   filesystem, a pending multipart upload to its final key on S3); the attempt then saves its
   manifest. The append groups read are replaced: their records are now in the canonical group
   (``merge_bucket``);
6. job commit and ``completed`` with the write statistics: ``lakewarden.table.job_commit.
   commit_instant``, the same function the Spark driver and the job-committer service run
   (the files are put in place, then ``completed`` is appended after the conflict rules). On a
   conflict (or any failure before completion) the instant is rolled back, then the job is
   aborted (its files are deleted), and the error is re-raised. When the completion's outcome
   is unknown the timeline is re-read: a completed instant is a success; otherwise the write
   is abandoned the same way (the ``rolled_back`` entry settles that it never completes).
   Steps 4-6 run under the instant's heartbeat.

A store that can neither rename nor hold back uploads (the in-memory test store) has no
private staging: files go straight to their final keys (invisible until ``completed`` names
them) and are deleted after a rollback.

Merge semantics (per bucket: the records of all its slices, keyed by ``_lw_record_key``):

- **upsert**: incoming records replace stored ones with the same key; with an ordering field
  the larger ordering value wins (null is the smallest) and ties go to the incoming record.
  Duplicates within the input are reduced the same way, a later input record winning a tie.
- **insert**: append without deduplication, as Hudi's insert does (no lookup, duplicates are
  the caller's choice; use upsert to replace).
- **delete**: drop stored records whose key is in the input (only the key and partition columns
  are needed). A bucket left empty has its canonical group listed in ``replaced_file_groups``;
  a bucket with nothing to delete is not rewritten (and its append groups stay).

Every data file carries the meta columns ``_lw_commit_time`` (instant that wrote the record),
``_lw_record_key`` (key text), ``_lw_partition_path`` and ``_lw_file_name``, before the user
columns; readers strip them unless asked.

The action is ``commit`` for both table types: merge-on-read log files come with
``lakewarden.logfile``; until then a ``mor`` table is written copy-on-write, which is a valid
MOR layout (base files only).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakewarden.commit import CommitterOptions, ManifestCommitter, TaskAttempt, new_job_id
from lakewarden.errors import NonRetryableError
from lakewarden.storage import Storage
from lakewarden.table.bucket import BucketSlices, replaced_by_merge, route
from lakewarden.table.config import (
    META_COMMIT_TIME,
    META_FILE_NAME,
    META_RECORD_KEY,
    TableConfig,
)
from lakewarden.table.coordinator import Coordinator
from lakewarden.table.files import BaseFileName, WriteToken, file_key
from lakewarden.table.job_commit import JobCommitSpec, abandon, commit_instant
from lakewarden.table.reader import read_data_file
from lakewarden.table.snapshot import FileSlice, Snapshot, build_snapshot
from lakewarden.table.stats import CommitStats, FileGroupId, WorkloadProfile, WriteStat
from lakewarden.table.timeline import Timeline
from lakewarden.table.transaction import WriteTransaction

Operation = Literal["insert", "upsert", "delete"]
OPERATIONS: tuple[str, ...] = ("insert", "upsert", "delete")
_SEQ = "__lw_seq"
# A write's job is small (one attempt, a file per bucket touched): the defaults suit it.
_OPTIONS = CommitterOptions()
_MAX_REPR = 300


class SchemaMismatchError(NonRetryableError):
    """The input's columns or types do not match the table schema."""


class InvalidRecordError(NonRetryableError):
    """A record cannot be written (null record key, null in a required field).

    ``record_index`` is its row number in the input, ``record`` its values."""

    def __init__(self, message: str, *, table: str, record_index: int, record: object) -> None:
        super().__init__(message, table=table)
        self.record_index = record_index
        self.record = record


# -- 1. validation --------------------------------------------------------------------------


def validate_input(data: pa.Table, config: TableConfig, operation: str) -> pa.Table:
    """The input conformed to the table schema (column order, schema metadata).

    Delete needs only the record key and the partition columns; other columns are dropped.
    Raises: SchemaMismatchError, InvalidRecordError, ValueError (unknown operation)."""
    if operation not in OPERATIONS:
        raise ValueError(f"operation must be one of {', '.join(OPERATIONS)}, got {operation!r}")
    schema = config.pa_schema
    needed = [config.record_key, *config.partition_by] if operation == "delete" else schema.names
    _check_columns(data.schema, schema, needed, config.name, operation)
    data = data.select(needed)
    _check_not_null(data, config.record_key, "has a null record key", config)
    for field in schema:
        if not field.nullable and field.name in data.column_names:
            problem = f"has a null in required field {field.name!r}"
            _check_not_null(data, field.name, problem, config)
    if operation != "delete":
        data = data.cast(schema)  # types are equal; this only sets metadata and nullability
    return data


def _check_columns(
    got: pa.Schema, want: pa.Schema, needed: Sequence[str], table: str, operation: str
) -> None:
    missing = [n for n in needed if n not in got.names]
    extra = [n for n in got.names if n not in want.names]
    dupes = sorted({n for n in got.names if got.names.count(n) > 1})
    wrong = [
        f"{n}: {got.field(n).type} (table: {want.field(n).type})"
        for n in needed
        if n in got.names and n not in dupes and not got.field(n).type.equals(want.field(n).type)
    ]
    problems = [
        f"missing columns {missing}" if missing else "",
        f"columns not in the table {extra}" if extra and operation != "delete" else "",
        f"duplicate columns {dupes}" if dupes else "",
        f"wrong types {wrong}" if wrong else "",
    ]
    found = [p for p in problems if p]
    if found:
        raise SchemaMismatchError(
            f"{operation} input does not match the schema of table {table!r}: "
            f"{'; '.join(found)}. Help: cast or select the input to the table schema "
            f"({want.names}); nothing was written.",
            table=table,
        )


def _check_not_null(data: pa.Table, column: str, problem: str, config: TableConfig) -> None:
    values = data.column(column)
    if values.null_count == 0:
        return
    index = pc.index(pc.is_null(values), True).as_py()
    record = data.slice(index, 1).to_pylist()[0]
    shown = repr(record)
    shown = shown if len(shown) <= _MAX_REPR else shown[:_MAX_REPR] + "...}"
    raise InvalidRecordError(
        f"record {index} {problem} (record key field {config.record_key!r}): {shown}. "
        f"{values.null_count} record(s) of the input have this problem; nothing was written.",
        table=config.name,
        record_index=index,
        record=record,
    )


# -- 5. merge -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Merged:
    """The new content of a file group (None: the group became empty) and what changed."""

    table: pa.Table | None
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    changed: bool = True


def merge_schema(config: TableConfig) -> pa.Schema:
    """The schema merges work in: the file schema without ``_lw_file_name`` (set on write)."""
    schema = config.file_schema
    return schema.remove(schema.get_field_index(META_FILE_NAME))


def stamped(incoming: pa.Table, instant: str, config: TableConfig, operation: str) -> pa.Table:
    """Routed input with ``_lw_commit_time``; in the merge schema unless it is a delete."""
    times = pa.repeat(pa.scalar(instant), len(incoming))
    incoming = incoming.add_column(0, META_COMMIT_TIME, times)
    return incoming if operation == "delete" else incoming.cast(merge_schema(config))


def stored(existing: pa.Table, config: TableConfig) -> pa.Table:
    """A base file's records in the merge schema."""
    return existing.drop_columns([META_FILE_NAME]).cast(merge_schema(config))


def merge(
    operation: str,
    existing: pa.Table | None,
    incoming: pa.Table,
    ordering_field: str | None,
) -> Merged:
    """The merge of one file group. ``existing`` and ``incoming`` carry the meta columns
    (``_lw_file_name`` excluded) and the same user columns (for delete, incoming has only the
    key and partition columns)."""
    if operation == "delete":
        return _merge_delete(existing, incoming)
    if operation == "insert":
        table = incoming if existing is None else pa.concat_tables([existing, incoming])
        return Merged(table, inserts=len(incoming))
    return _merge_upsert(existing, incoming, ordering_field)


def _merge_delete(existing: pa.Table | None, incoming: pa.Table) -> Merged:
    if existing is None:
        return Merged(None, changed=False)
    doomed = pc.is_in(existing.column(META_RECORD_KEY), value_set=incoming.column(META_RECORD_KEY))
    deletes = pc.sum(doomed).as_py() or 0
    if deletes == 0:
        return Merged(existing, changed=False)
    kept = existing.filter(pc.invert(doomed))
    return Merged(kept if len(kept) else None, deletes=deletes)


def _merge_upsert(existing: pa.Table | None, incoming: pa.Table, ordering: str | None) -> Merged:
    incoming_keys = incoming.column(META_RECORD_KEY)
    if existing is None:
        winners = _dedupe(incoming, ordering)
        return Merged(winners, inserts=len(winners))
    touched = pc.is_in(existing.column(META_RECORD_KEY), value_set=incoming_keys)
    untouched = existing.filter(pc.invert(touched))
    # Only records sharing a key with the input need ordering; the rest are carried over.
    candidates = pa.concat_tables([existing.filter(touched), incoming])
    winners = _dedupe(candidates, ordering)
    updates = pc.count_distinct(existing.filter(touched).column(META_RECORD_KEY)).as_py()
    inserts = pc.count_distinct(incoming_keys).as_py() - updates
    return Merged(pa.concat_tables([untouched, winners]), inserts=inserts, updates=updates)


def _dedupe(table: pa.Table, ordering: str | None) -> pa.Table:
    """One record per key: the largest ordering value, then the latest row (incoming rows
    follow stored ones, so ties go to the incoming record, then to the later input record)."""
    if len(table) == 0:
        return table
    ones = pa.repeat(pa.scalar(1, pa.int64()), len(table))
    ranked = table.append_column(_SEQ, pc.cumulative_sum(ones))
    sort_keys = [(META_RECORD_KEY, "ascending")]
    if ordering is not None:
        sort_keys.append((ordering, "descending"))
    sort_keys.append((_SEQ, "descending"))
    ranked = ranked.take(pc.sort_indices(ranked, sort_keys=sort_keys, null_placement="at_end"))
    keys = ranked.column(META_RECORD_KEY).combine_chunks()
    first = pa.concat_arrays(
        [pa.array([True]), pc.not_equal(keys.slice(1), keys.slice(0, len(keys) - 1))]
    )
    return ranked.filter(first).drop_columns([_SEQ])


@dataclass(frozen=True)
class BucketMerge:
    """The merge of one bucket: the new content of its canonical group and the file groups
    the commit replaces (``lakewarden.table.bucket.replaced_by_merge``)."""

    merged: Merged
    replaced: tuple[FileGroupId, ...] = ()


def merge_bucket(
    storage: Storage,
    config: TableConfig,
    canonical: FileGroupId,
    slices: Sequence[FileSlice],
    incoming: pa.Table,
    *,
    operation: str,
    instant: str,
) -> BucketMerge:
    """``incoming`` (routed to ``canonical``) merged with the records of every slice of its
    bucket (``BucketSlices.of(canonical)``: the canonical group and its append groups). The
    result belongs in the canonical group; the Python writer and the Spark tasks both use it."""
    existing = [
        stored(read_data_file(storage, s.base_file.path), config)
        for s in slices
        if s.base_file is not None
    ]
    merged = merge(
        operation,
        pa.concat_tables(existing) if existing else None,
        stamped(incoming, instant, config, operation),
        config.ordering_field,
    )
    if not merged.changed:
        return BucketMerge(merged)
    replaced = replaced_by_merge(canonical, slices, emptied=merged.table is None)
    return BucketMerge(merged, tuple(replaced))


# -- the write protocol ---------------------------------------------------------------------


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


def write(ctx: WriteContext, data: pa.Table, operation: Operation) -> CommitResult:
    """Write ``data`` as one instant (steps in the module docstring).

    Raises: SchemaMismatchError, InvalidRecordError (nothing written); WriteConflictError
    subclasses (files deleted, instant rolled back); CommitStateUnknownError (the outcome could
    not be established; the files stay for the cleaner)."""
    data = validate_input(data, ctx.config, operation)  # 1
    groups = route(data, ctx.config)  # 2
    txn = WriteTransaction.begin(  # 3
        ctx.timeline, ctx.coordinator, ctx.config.table_id, operation=operation, actor=ctx.actor
    )
    job: ManifestCommitter | None = None
    written: list[str] = []
    try:
        job = _job(ctx.storage, txn.instant)
        with txn.heartbeat():
            buckets = BucketSlices(_base_snapshot(ctx.timeline, txn.instant))
            touched = dict.fromkeys(g for c in groups for g in buckets.file_groups(c))
            txn.inflight(WorkloadProfile(operation=operation, file_groups=tuple(touched)))  # 4
            attempt = _attempt(job)
            stats = _write_groups(ctx, txn.instant, buckets, groups, operation, attempt, written)
            accepted = _commit_attempt(attempt)  # 5
            spec = JobCommitSpec(txn.instant, _job_id(job, txn.instant), accepted, stats)
            outcome = commit_instant(job, txn, spec)  # 6
            return CommitResult(txn.instant, outcome.stats)
    except Exception as err:
        _abandon(ctx.storage, txn, job, written, err)
        raise


def _job(storage: Storage, instant: str) -> ManifestCommitter | None:
    """The write's committer job, set up; None on a store without private staging."""
    if not storage.capabilities.private_staging:
        return None
    job = ManifestCommitter(storage, new_job_id(prefix=instant), options=_OPTIONS)
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


def _commit_attempt(attempt: TaskAttempt | None) -> tuple[str, ...]:
    if attempt is None:
        return ()
    attempt.commit()
    return (str(attempt.attempt_id),)


def _base_snapshot(timeline: Timeline, instant: str) -> Snapshot:
    """The snapshot as of this instant's ``requested`` entry: what the write builds on. A
    completion after that entry on a file group this write touches is a conflict anyway."""
    state = timeline.load()
    mine = state.get(instant)
    assert mine is not None, "the transaction's requested entry is on the log"
    before = [s for s in state.completed() if (s.completed_seq or 0) < mine.requested_seq]
    return build_snapshot(before)


def _write_groups(
    ctx: WriteContext,
    instant: str,
    buckets: BucketSlices,
    routed: dict[FileGroupId, pa.Table],
    operation: str,
    attempt: TaskAttempt | None,
    written: list[str],
) -> CommitStats:
    """Merge every bucket and write its canonical group into the task attempt, in parallel
    (pyarrow releases the GIL)."""
    groups = list(routed.items())

    def one(task: int) -> tuple[BucketMerge, WriteStat | None]:
        group, incoming = groups[task]
        result = merge_bucket(
            ctx.storage,
            ctx.config,
            group,
            buckets.of(group),
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

    with ThreadPoolExecutor(max_workers=max(1, min(ctx.max_threads, len(groups)))) as pool:
        results = list(pool.map(one, range(len(groups))))
    return CommitStats(
        operation=operation,
        write_stats=tuple(stat for _, stat in results if stat is not None),
        replaced_file_groups=tuple(g for r, _ in results for g in r.replaced),
        # Deletes that emptied a bucket have no write statistic to count them.
        extra_metadata={"num_deletes": str(sum(r.merged.deletes for r, _ in results))}
        if operation == "delete"
        else {},
    )


def _file_bytes(config: TableConfig, name: str, table: pa.Table) -> bytes:
    table = table.append_column(META_FILE_NAME, pa.repeat(pa.scalar(name), len(table)))
    table = table.select(config.file_schema.names).cast(config.file_schema)
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def _abandon(
    storage: Storage,
    txn: WriteTransaction,
    job: ManifestCommitter | None,
    written: list[str],
    err: Exception,
) -> None:
    """Append ``rolled_back`` first, then abort the job (or delete the files written directly).

    The order matters after ``CommitStateUnknownError``: the lost ``completed`` entry may have
    landed, in which case the rollback is refused and the files must stay (they are committed).
    Only once the instant is terminal without completing are its files garbage. A crash between
    the two steps leaves invisible files of a rolled-back instant, which the cleaner removes.
    ``commit_instant`` abandons on its own failures already; this is idempotent after it.
    A failure here is attached to ``err`` as a note: ``err`` is what the caller must see."""
    if not abandon(job, txn, err, stage="write_files"):
        return
    for key in written:
        try:
            storage.delete(key)
        except Exception as delete_err:
            err.add_note(f"deleting {key} of instant {txn.instant} failed: {delete_err!r}")
