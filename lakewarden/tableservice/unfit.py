"""The records a compaction cannot write, and which of them may go to the error table.

A compaction writes what its file slice reads as (``lakewarden.table.mor.read_slice``): the
base file merged with exactly the log blocks the completed deltacommits' statistics name,
in the table's current schema. Two kinds of trouble can stop it, and they are treated apart
because of what the statistics promise.

**Records the schema cannot hold: may be diverted.** A value written under an earlier
schema that the table's schema no longer holds (a narrowed type, a column made required, a
string that no longer parses) is a record that *was* read intact: it can be set aside with
its content, its key and where it came from. ``compact_slice`` then merges the slice in a
*wide* schema (each column promoted to hold every source's values) and casts the merge's
result, record by record, to the table's schema. Only the records the slice would hold after
the merge are judged: a version that a later block supersedes or deletes is never written
whatever its values, so it is not a failed record. A key whose latest version cannot be
written is absent from the compacted slice (its older versions are superseded: showing one
would present a stale value as current) and its latest version is in the error table. So
for every file group ``records written + records diverted = records the merge produced``,
and the compaction's ``completed`` entry counts the diverted ones (``failed_records``).

The plan chooses (``ServicePlan.bad_records``, recorded when it is scheduled, so every
attempt does the same): ``fail`` (the default, as for ``Table.write``: an
``UnwritableRecordsError`` naming how many records and the first reason; the plan stays
pending) or ``error-table`` (diverted: ``ErrorRow``s with the compaction instant as
``commitTime``, the file group, the source base or log file, the log block
``<seq>@<offset>`` and the reason). ``skip`` is not offered: a compaction that drops
committed records without keeping them would silently change what readers see.

**Input that cannot be read as records: must fail** (``UndivertibleRecordsError``, or the
reader's ``MissingCommittedBlockError``), whatever the plan says:

- a committed block that is missing or damaged (``MissingCommittedBlockError``): its write
  statistic counts its records, but no record can be recovered from damaged bytes, so none
  can be set aside; writing the slice without it would make the compacted file group hold
  fewer records than the statistics say were committed, with nothing holding the
  difference;
- a committed block that is intact (its CRC holds) but whose content does not decode, or
  lacks a column of the schema: the same;
- a delete block whose keys cannot be read as the key's type: a delete cannot be "set
  aside"; dropping it would bring deleted records back;
- a column whose types in the sources cannot be merged (no wide type holds them both).

Damaged bytes that the statistics do *not* need (a torn tail, a damaged copy of a block
whose intact copy is found, blocks of attempts that never committed) hold no committed
record: the reader skips and reports them (``Selection.report``), the statistics still add
up, and the compaction proceeds without diverting anything. They are not failed records,
and the error table holds only failed records (invariant 8).

The fast path (``read_slice``, one cast per source) is taken first; the wide merge runs only
when it fails, so a table without such records pays nothing.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakewarden.errors import LakewardenError
from lakewarden.errortable import records as ctx
from lakewarden.errortable.divert import spool_key, spool_rows
from lakewarden.errortable.records import ErrorRow, compaction_record_message
from lakewarden.logfile import BlockType, LogBlock, Selection
from lakewarden.storage import Storage
from lakewarden.table.config import META_COMMIT_TIME, META_FILE_NAME, TableConfig
from lakewarden.table.files import file_key, split_key
from lakewarden.table.job_commit import StatisticsMismatchError
from lakewarden.table.merge import in_key_order
from lakewarden.table.mor import read_slice, slice_selection
from lakewarden.table.mor_merge import merge_key, merge_slice
from lakewarden.table.snapshot import FileSlice
from lakewarden.table.stats import CommitStats
from lakewarden.tableservice.errors import UndivertibleRecordsError, UnwritableRecordsError
from lakewarden.tableservice.output import service_job_id
from lakewarden.tableservice.strategy import RewriteJob

__all__ = ["CompactedSlice", "compact_slice", "spool_failed", "unfit_records"]

# What pyarrow raises when a value, a block or a column cannot be read or cast.
_ARROW_ERRORS = (pa.ArrowException, ValueError, TypeError, KeyError)


@dataclass(frozen=True)
class CompactedSlice:
    """The records to write (the file schema, ``_lw_file_name`` included) and the records
    set aside for the error table."""

    records: pa.Table
    failed: tuple[ErrorRow, ...] = ()


def compact_slice(job: RewriteJob, file_slice: FileSlice, *, task: int) -> CompactedSlice:
    """What the compaction of ``file_slice`` writes (module docstring).

    Raises: UnwritableRecordsError (records the schema cannot hold, ``bad_records="fail"``),
    UndivertibleRecordsError, MissingCommittedBlockError, StorageError."""
    try:
        records = read_slice(job.storage, job.config, file_slice)
    except (LakewardenError, OSError):
        raise  # a missing file is the executor's to name, never a record's fault
    except _ARROW_ERRORS:
        pass  # judged record by record below
    else:
        return CompactedSlice(in_key_order(records, job.config))
    merged, selection = _wide_merge(job, file_slice)
    bad = unfit_records(merged, job.config.file_schema)
    group = str(file_slice.file_group)
    if bad and job.plan.bad_records != "error-table":
        first = min(bad)
        raise UnwritableRecordsError(
            f"compaction {job.instant} of table {job.config.name}: {len(bad)} record(s) of "
            f"file group {group} cannot be written in the table's schema (the first: "
            f"{bad[first]}); nothing was completed. Help: schedule the compaction with "
            "bad_records='error-table' (`lakewarden compact schedule --bad-records "
            "error-table`) to set them aside in the error table, or change the schema back "
            "so that it holds them.",
            table=job.config.name,
            instant=job.instant,
            file_group=group,
            count=len(bad),
        )
    keep = np.ones(len(merged), dtype=bool)
    keep[list(bad)] = False
    try:
        fitted = merged.filter(pa.array(keep)).cast(job.config.file_schema)
    except _ARROW_ERRORS as err:
        raise _undivertible(job, group, f"the records left do not fit the schema: {err}") from err
    rows = _error_rows(job, file_slice, merged, bad, selection, task=task)
    return CompactedSlice(in_key_order(fitted, job.config), rows)


def spool_failed(
    storage: Storage, instant: str, attempt: int, rows: Sequence[ErrorRow], stats: CommitStats
) -> None:
    """Make the records an executor attempt set aside durable before its pre-commit, as
    ``Table.write`` does with its bad records (``lakewarden.errortable.divert``: the spool of
    this attempt, committed into the error table once the plan completes with this attempt,
    dropped otherwise). No ``completed`` entry counts ``failed_records`` without them.

    Raises: StorageError, StatisticsMismatchError (the statistics count other records than
    ``rows``: nothing is completed)."""
    if len(rows) != stats.failed_records:
        raise StatisticsMismatchError(
            f"plan {instant}: the statistics count {stats.failed_records} failed record(s), "
            f"but the rewrite set aside {len(rows)}; nothing was completed. Help: a strategy "
            "that sets records aside returns them in UnitResult.failed (FileGroupStrategy) or "
            "adds them to RewriteJob.failed, and counts them in failed_records.",
            instant=instant,
        )
    if rows:
        spool_rows(storage, spool_key(instant, attempt), rows)


def unfit_records(table: pa.Table, schema: pa.Schema) -> dict[int, str]:
    """The rows of ``table`` that ``schema`` cannot hold, each with why (the first column
    that refuses it). Only the columns whose type or nullability differ are checked; a cast
    that fails is split in halves until the failing rows are found."""
    bad: dict[int, str] = {}
    for target in schema:
        column = table.column(target.name)
        array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        if not target.nullable and array.null_count:
            nulls = np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))
            for null in nulls.tolist():
                bad.setdefault(null, f"column {target.name!r} is required but holds null")
        if array.type != target.type:
            widened = f"column {target.name!r}: {array.type} value does not fit {target.type}"
            for row, why in _uncastable(array, target.type, 0):
                bad.setdefault(row, f"{widened}: {why}")
    return bad


def _uncastable(array: pa.Array, to: pa.DataType, offset: int) -> Iterator[tuple[int, str]]:
    try:
        pc.cast(array, to, safe=True)
        return
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError) as err:
        # No cast between the types at all: every value fails.
        valid = np.flatnonzero(array.is_valid().to_numpy(zero_copy_only=False))
        yield from ((offset + int(i), str(err)) for i in valid)
        return
    except (pa.ArrowInvalid, ValueError) as err:
        if len(array) == 1:
            yield offset, str(err)
            return
    half = len(array) // 2
    yield from _uncastable(array.slice(0, half), to, offset)
    yield from _uncastable(array.slice(half), to, offset + half)


def _wide_merge(job: RewriteJob, file_slice: FileSlice) -> tuple[pa.Table, Selection | None]:
    """The slice merged in the wide schema, and the log blocks that went into it.

    Raises: UndivertibleRecordsError, MissingCommittedBlockError, StorageError."""
    config, group = job.config, str(file_slice.file_group)
    selection = slice_selection(job.storage, file_slice) if file_slice.log_files else None
    if selection is not None:
        selection.report()
    blocks = selection.blocks if selection is not None else []
    base: pa.Table | None = None
    sources: list[tuple[str, pa.Schema]] = []
    if file_slice.base_file is not None:
        path = file_slice.base_file.path
        try:
            base = _read_parquet(job.storage, path, config.file_schema.names)
            base = config.with_virtual(base, path, file_slice.file_group.partition_path)
        except OSError:
            raise
        except _ARROW_ERRORS as err:
            raise _undivertible(job, group, f"base file {path} cannot be read: {err}") from err
        sources.append((f"base file {path}", base.schema))
    for block in blocks:
        if block.block_type is not BlockType.DATA:
            continue
        try:
            sources.append((f"log block {_where(block)}", block.records().schema))
        except _ARROW_ERRORS as err:
            why = f"committed log block {_where(block)} does not decode: {err}"
            raise _undivertible(job, group, why) from err
    wide = _wide_schema(job, group, config.file_schema, sources)
    try:
        if base is not None:
            base = base.select(wide.names).cast(wide)
        merged = merge_slice(
            base, blocks, schema=wide, key=merge_key(config), ordering=config.ordering_field
        )
    except _ARROW_ERRORS as err:
        why = (
            f"the slice's records cannot be merged (a delete block's keys, a block's values): {err}"
        )
        raise _undivertible(job, group, why) from err
    return merged.select(config.file_schema.names), selection


def _wide_schema(
    job: RewriteJob, group: str, schema: pa.Schema, sources: Sequence[tuple[str, pa.Schema]]
) -> pa.Schema:
    """Each column of ``schema``, nullable, promoted to hold every source's values.

    Raises: UndivertibleRecordsError (a source lacks a column, or no type holds both)."""
    fields = []
    for target in schema:
        wide = target.with_nullable(True)
        for where, source in sources:
            at = source.get_field_index(target.name)
            if at < 0:
                if target.name == META_FILE_NAME:
                    continue  # log blocks never hold it: the merge adds it
                why = f"{where} has no column {target.name!r}"
                raise _undivertible(job, group, why)
            other = source.field(at)
            try:
                wide = pa.unify_schemas(
                    [pa.schema([wide]), pa.schema([other])], promote_options="permissive"
                ).field(0)
            except _ARROW_ERRORS as err:
                why = f"column {target.name!r} of {where} ({other.type}) cannot merge: {err}"
                raise _undivertible(job, group, why) from err
        fields.append(wide.with_nullable(True))
    return pa.schema(fields, metadata=schema.metadata)


def _read_parquet(storage: Storage, key: str, names: Sequence[str]) -> pa.Table:
    path = storage.local_path(key)
    source: Any = path if path is not None else pa.BufferReader(storage.read(key))
    with pq.ParquetFile(source, memory_map=path is not None) as parquet:
        present = [n for n in names if n in parquet.schema_arrow.names]
        return parquet.read(columns=present)


def _error_rows(
    job: RewriteJob,
    file_slice: FileSlice,
    merged: pa.Table,
    bad: dict[int, str],
    selection: Selection | None,
    *,
    task: int,
) -> tuple[ErrorRow, ...]:
    """The ``ErrorRow`` of each record in ``bad``, with where it came from."""
    if not bad:
        return ()
    config, group = job.config, file_slice.file_group
    at = sorted(bad)
    taken = merged.take(pa.array(at, pa.int64()))
    user = taken.select(config.pa_schema.names)
    schema_text = json.dumps({f.name: str(f.type) for f in user.schema})
    names = taken.column(META_FILE_NAME).to_pylist()
    times = taken.column(META_COMMIT_TIME).to_pylist()
    blocks = _blocks_by_key(config, selection, {n for n in names if n is not None}, group)
    base_name = split_key(file_slice.base_file.path)[1] if file_slice.base_file else None
    job_id = service_job_id(job.instant, job.attempt)
    now = str(_now_ms())
    rows = []
    for i, record, name, written in zip(at, user.to_pylist(), names, times, strict=True):
        key = record.get(config.record_key)
        source = file_key(group.partition_path, name) if name else ""
        block = blocks.get((source, _hashable(key))) if name != base_name else None
        rows.append(
            ErrorRow(
                uid=str(uuid.uuid4()),
                ts=now,
                schema=schema_text,
                record=json.dumps(record, default=str, sort_keys=True),
                message=compaction_record_message(job.instant, str(group), bad[i]),
                context={
                    ctx.COMMIT_TIME: job.instant,
                    ctx.TABLE_NAME: config.name,
                    ctx.TABLE_ID: config.table_id,
                    ctx.TABLE_URI: job.storage.uri,
                    ctx.PARTITION_PATH: group.partition_path,
                    ctx.RECORD_KEY: "" if key is None else str(key),
                    ctx.TASK_ATTEMPT: f"{job_id}_{task}",
                    ctx.JOB_ID: job_id,
                    "operation": "compaction",
                    ctx.FILE_GROUP: str(group),
                    ctx.SOURCE_FILE: source,
                    ctx.SOURCE_BLOCK: ""
                    if block is None
                    else f"{block.sequence_no}@{block.offset}",
                    ctx.SOURCE_INSTANT: written or "",
                },
            )
        )
    return tuple(rows)


def _blocks_by_key(
    config: TableConfig, selection: Selection | None, names: set[str], group: Any
) -> dict[tuple[str, Any], LogBlock]:
    """(log file key, record key) -> the last committed data block of that file holding the
    key: the block a merged record's version came from."""
    found: dict[tuple[str, Any], LogBlock] = {}
    if selection is None:
        return found
    keys = {file_key(group.partition_path, n) for n in names}
    for block in selection.blocks:
        if block.block_type is not BlockType.DATA or block.path not in keys:
            continue
        for key in block.records().column(config.record_key).to_pylist():
            found[(block.path, _hashable(key))] = block
    return found


def _hashable(value: Any) -> Any:
    return (
        json.dumps(value, default=str, sort_keys=True) if isinstance(value, dict | list) else value
    )


def _where(block: LogBlock) -> str:
    return f"{block.path}@{block.offset} (instant {block.instant}, seq {block.sequence_no})"


def _undivertible(job: RewriteJob, group: str, why: str) -> UndivertibleRecordsError:
    return UndivertibleRecordsError(
        f"compaction {job.instant} of table {job.config.name}, file group {group}: {why}. "
        "No record of it can be set aside for the error table, and compacting without it "
        "would change what the file group holds without a trace; nothing was completed. "
        "Help: restore the file from a backup or the store's versioning (`lakewarden replay "
        "<uri>` shows which instant wrote it), or make the table's schema hold its values.",
        table=job.config.name,
        instant=job.instant,
        file_group=group,
    )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
