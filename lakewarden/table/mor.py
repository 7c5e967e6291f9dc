"""Merge-on-read file slices: where an attempt's log blocks go, and how a slice is read.

**Writing.** An upsert or delete of a bucket whose current slice is its canonical group's base
file (plus log files) appends one block to that slice instead of rewriting the base file:
a data block with the input records (reduced to one per key by the merge rules, stamped with
the instant), or a delete block with the keys. Where the block goes (``log_target``): a new
log file version of the slice, ``max(version) + 1``, named by the attempt's write token and the
instant, written once and only if absent, on every store. So a log file holds the blocks of
one instant's one attempt: a retried or speculative attempt writes a file of its own, and a
rolled-back instant's log files are garbage by their name alone
(``lakewarden.table.clean.garbage``), while a committed block is never in a file of another
instant. (Log files appended in place across instants, as earlier versions wrote them on a
local filesystem, are still read: the statistics say which of their blocks count.)

The write statistic (``log_statistic``) names the log file, the instant, the attempt and its
block count: what ``lakewarden.logfile.select.select_committed`` takes on read.

**Reading** (``read_slice``): the base file and the selected blocks of every log file in the
order they were committed, merged in one vectorized step (``lakewarden.table.mor_merge``) with
the result a copy-on-write write of the same inputs gives (data blocks as upserts, delete
blocks as deletes, ``lakewarden.table.merge``'s rules). That is why a merge-on-read table
reads the same as a copy-on-write table fed the same writes. Damaged regions and blocks of
uncommitted attempts are skipped and logged (``Selection.report``); a committed block that
is missing raises ``MissingCommittedBlockError``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from lakewarden.logfile import (
    CommittedBlocks,
    LogScan,
    LogWrite,
    LogWriter,
    Selection,
    scan_log,
    select_by_sequence,
    select_committed,
)
from lakewarden.storage import AlreadyExistsError, Storage
from lakewarden.table._mor_read import FixedColumns, LogSides
from lakewarden.table.bucket import BucketSlices
from lakewarden.table.config import (
    META_COMMIT_TIME,
    META_PARTITION_PATH,
    META_RECORD_KEY,
    TableConfig,
)
from lakewarden.table.files import LogFileName, WriteToken, file_key, split_key
from lakewarden.table.instant import Action
from lakewarden.table.log_cache import LogCache, log_bytes
from lakewarden.table.mor_merge import (
    LogSide,
    merge_base,
    merge_columns,
    merge_key,
    merge_slice,
    prepare_logs,
)
from lakewarden.table.snapshot import FileSlice
from lakewarden.table.stats import FileGroupId, WriteStat

_MAX_VERSION_SKIPS = 100

__all__ = [
    "delete_keys",
    "ingestion_action",
    "log_slice",
    "log_statistic",
    "log_target",
    "read_slice",
    "read_slices",
    "slice_selection",
    "write_blocks",
]


def log_target(file_slice: FileSlice, token: WriteToken, instant: str, *, skip: int = 0) -> str:
    """The key of the log file an attempt with ``token`` writes its blocks of ``instant`` to;
    ``skip`` versions further when that name is taken (a rolled-back write's).

    Raises: MalformedFileNameError (a log file of the slice has a malformed name)."""
    group = file_slice.file_group
    names = [LogFileName.parse(split_key(s.path)[1]) for s in file_slice.log_files]
    version = max((n.version for n in names), default=0) + 1 + skip
    name = LogFileName(group.file_id, file_slice.base_instant, version, token, instant)
    return file_key(group.partition_path, name.render())


def ingestion_action(config: TableConfig) -> Action:
    """What a write to the table is on the timeline: ``deltacommit`` on merge-on-read."""
    return Action.DELTACOMMIT if config.merge_on_read else Action.COMMIT


def log_slice(
    config: TableConfig, buckets: BucketSlices, canonical: FileGroupId, operation: str
) -> FileSlice | None:
    """The slice an upsert or delete of ``canonical``'s bucket appends a log block to on a
    merge-on-read table: the bucket's canonical slice, when it has a base file and no append
    group beside it (else the bucket is merged and rewritten as a base file). Anything else
    (an insert, a copy-on-write table) looks up no slice: the snapshot is not indexed for it."""
    if not config.merge_on_read or operation not in ("upsert", "delete"):
        return None
    slices = buckets.of(canonical)
    if len(slices) != 1 or slices[0].file_group != canonical or slices[0].base_file is None:
        return None
    return slices[0]


def delete_keys(stamped_keys: pa.Table) -> pa.Table:
    """The content of a delete block: the commit time, record key and partition path."""
    return stamped_keys.select([META_COMMIT_TIME, META_RECORD_KEY, META_PARTITION_PATH])


def log_statistic(
    file_slice: FileSlice, written: LogWrite, *, records: int, delete: bool
) -> WriteStat:
    """The write statistic of one attempt's blocks in a log file."""
    return WriteStat(
        file_group=file_slice.file_group,
        path=written.key,
        base_instant=file_slice.base_instant,
        num_records=records,
        num_updates=0 if delete else records,
        num_deletes=records if delete else 0,
        size_bytes=written.size_bytes,
        log_attempt=written.attempt,
        log_block_count=written.block_count,
        log_instant=written.instant,
    )


def write_blocks(
    storage: Storage,
    file_slice: FileSlice,
    records: pa.Table,
    *,
    instant: str,
    attempt: str,
    token: WriteToken,
    delete: bool,
    written: list[str] | None = None,
) -> WriteStat:
    """Write one block of ``records`` (merge schema, stamped) or of their keys as a new log
    file of the slice (put-if-absent: atomic, so a failed put leaves nothing); its key goes
    into ``written``, which the caller's rollback deletes.

    A version whose name is taken (a rolled-back attempt of the same instant and token left
    it) moves on to the next version.

    Raises: StorageError."""
    for skip in range(_MAX_VERSION_SKIPS + 1):
        key = log_target(file_slice, token, instant, skip=skip)
        writer = LogWriter(storage, key, instant=instant, attempt=attempt, append=False)
        if delete:
            writer.add_delete(delete_keys(records))
        else:
            writer.add_data(records)
        try:
            done = writer.flush()
        except AlreadyExistsError:
            if skip == _MAX_VERSION_SKIPS:
                raise
            continue
        if written is not None:
            written.append(key)  # only now: a name that was taken is not ours to delete
        return log_statistic(file_slice, done, records=len(records), delete=delete)
    raise AssertionError("unreachable")


def slice_selection(
    storage: Storage, file_slice: FileSlice, *, cache: LogCache | None = None
) -> Selection:
    """The blocks of ``file_slice``'s log files that count, in commit order; the files are
    scanned through ``cache`` when given (``lakewarden.table.log_cache``).

    Statistics naming an attempt are authoritative; a log file whose statistics name none (an
    older writer) falls back to HUDI-6758's rule and its blocks come first.

    Raises: MissingCommittedBlockError, StorageError."""
    scans: dict[str, LogScan] = {}
    for stat in file_slice.log_files:
        if stat.path not in scans:
            scans[stat.path] = (
                cache.scan(storage, stat.path)
                if cache is not None
                else scan_log(log_bytes(storage, stat.path), stat.path)
            )
    committed = [
        CommittedBlocks(stat.path, stat.log_instant, stat.log_attempt, stat.log_block_count)
        for stat in file_slice.log_files
        if stat.log_attempt is not None
        and stat.log_instant is not None
        and stat.log_block_count is not None
    ]
    legacy = [s for s in file_slice.log_files if s.log_attempt is None or s.log_instant is None]
    selection = select_committed(list(scans.values()), committed)
    if legacy:
        paths = dict.fromkeys(s.path for s in legacy)
        legacy_scans = [scans[p] for p in paths]
        instants = _instants(legacy, legacy_scans)
        fallback = select_by_sequence(legacy_scans, instants)
        selection.blocks[:0] = fallback.blocks
    return selection


def _instants(stats: Sequence[WriteStat], scans: Sequence[LogScan]) -> list[str]:
    named = [s.log_instant for s in stats if s.log_instant is not None]
    if len(named) == len(stats):
        return list(dict.fromkeys(named))
    found = (b.instant for scan in scans for b in scan.blocks if b.instant is not None)
    return list(dict.fromkeys([*named, *found]))


def read_slice(
    storage: Storage,
    config: TableConfig,
    file_slice: FileSlice,
    *,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """The records of a file slice, base file merged with its committed log blocks
    (``lakewarden.table.mor_merge``), in the file schema (``_lw_file_name`` is the file that
    holds each record's latest version), or only ``columns`` (names of the file schema): the
    base file and the blocks are then read for those, the record key and the ordering field.

    Raises: MissingCommittedBlockError, StorageError, KeyError (a column not in the file
    schema)."""
    schema = config.file_schema
    wanted = list(schema.names if columns is None else columns)
    key = merge_key(config)
    carried = merge_columns(schema, wanted, key=key, ordering=config.ordering_field)
    base: pa.Table | None = None
    if file_slice.base_file is not None:
        base = _read_base(storage, config, file_slice.base_file, carried)
    if file_slice.log_files:
        selection = slice_selection(storage, file_slice)
        selection.report()
        base = merge_slice(
            base, selection.blocks, schema=carried, key=key, ordering=config.ordering_field
        )
    merged = base if base is not None else carried.empty_table()
    return merged.select(wanted)


def read_slices(
    storage: Storage,
    config: TableConfig,
    slices: Sequence[FileSlice],
    *,
    columns: Sequence[str] | None = None,
    cache: LogCache | None = None,
) -> list[pa.Table]:
    """``read_slice`` of each of ``slices``, in their order, for a whole-table read; log files
    are scanned through ``cache`` when given (``lakewarden.table.log_cache``).

    Three things overlap. The base files are decoded by one pyarrow scan over all of them,
    the reader (and reader settings: parallel decoding, read-ahead, memory-mapped local
    files) that a read of plain base files uses. One thread prepares each slice's log side
    meanwhile (``LogSides``: it scans and CRC-checks the log files and picks one winner per
    key, none of which needs the base file). The calling thread merges each base file with
    its prepared log side as soon as the scan yields it. So decoding is not split among a
    pool of Python threads each starting its own parallel decode (those competed for two
    cores and cost a fifth more CPU than the decode itself), and neither the log files nor
    the merges wait for the decoding to end.

    A partition column whose value every slice's partition path fixes (``partition_values``)
    is neither decoded nor merged: pyarrow's scan would give every record that value anyway
    (as the read of a compacted table does), so it is added to each merged slice at the end.

    Raises: MissingCommittedBlockError, StorageError, KeyError (a column not in the file
    schema), OSError / pyarrow.ArrowInvalid (a base file that cannot be read)."""
    wanted = list(config.file_schema.names if columns is None else columns)
    key = merge_key(config)
    fixed = FixedColumns(config, slices, wanted, key=key)
    carried = merge_columns(
        config.file_schema,
        [name for name in wanted if name not in fixed.names],
        key=key,
        ordering=config.ordering_field,
    )
    with_base = [i for i, s in enumerate(slices) if s.base_file is not None]
    without_base = [i for i, s in enumerate(slices) if s.base_file is None]
    results: list[pa.Table | None] = [None] * len(slices)

    def prepare(file_slice: FileSlice) -> LogSide:
        selection = slice_selection(storage, file_slice, cache=cache)
        selection.report()
        return prepare_logs(
            selection.blocks, schema=carried, key=key, ordering=config.ordering_field
        )

    with LogSides(prepare) as sides:
        for i in with_base + without_base:  # the order the merges below ask for them
            sides.submit(i, slices[i])

        def merged(i: int, base: pa.Table | None) -> pa.Table:
            side = sides.get(i)
            if side is not None:
                base = merge_base(
                    base, side, schema=carried, key=key, ordering=config.ordering_field
                )
            records = base if base is not None else carried.empty_table()
            return fixed.add(records, slices[i]).select(wanted)

        bases = [slices[i] for i in with_base]
        for position, base in _scan_bases(storage, config, bases, carried):
            results[with_base[position]] = merged(with_base[position], base)
        for i in without_base:
            results[i] = merged(i, None)
    return [done for done in results if done is not None]


def _scan_bases(
    storage: Storage, config: TableConfig, slices: Sequence[FileSlice], schema: pa.Schema
) -> Iterator[tuple[int, pa.Table]]:
    """(position in ``slices``, ``schema`` columns of its base file) for every slice (each
    of another file group), in order, from one ordered scan; a file's batches are consecutive
    in it. A base file with no rows may yield no batch: it gets an empty table."""
    # Imported here: lakewarden.table.reader imports this module's readers lazily too.
    from lakewarden.table.reader import files_dataset

    stats = [s.base_file for s in slices if s.base_file is not None]
    if not stats:
        return
    dataset = files_dataset(storage, config, stats, config.file_schema)
    position = {fragment.path: i for i, fragment in enumerate(dataset.get_fragments())}
    scanner = dataset.scanner(columns=schema.names)
    done = 0  # slices before this position have been yielded
    batches: list[pa.RecordBatch] = []
    current = -1
    for tagged in scanner.scan_batches():
        at = position[tagged.fragment.path]
        if at != current:
            if current >= 0:
                yield current, _as_table(batches, schema)
                done = current + 1
            for empty in range(done, at):
                yield empty, schema.empty_table()
            current, batches = at, []
        batches.append(tagged.record_batch)
    if current >= 0:
        yield current, _as_table(batches, schema)
        done = current + 1
    for empty in range(done, len(stats)):
        yield empty, schema.empty_table()


def _as_table(batches: Sequence[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    table = pa.Table.from_batches(batches, schema=batches[0].schema)
    return table if table.schema.equals(schema) else table.select(schema.names).cast(schema)


def _read_base(
    storage: Storage, config: TableConfig, stat: WriteStat, schema: pa.Schema
) -> pa.Table:
    """The ``schema`` columns of a base file. One ``ParquetFile`` read (memory-mapped when the
    file is local) costs a tenth less than ``pyarrow.parquet.read_table``, which builds a
    dataset around the file first; the base file is most of a merged read's cost.

    Raises: StorageError, pyarrow.ArrowInvalid (not a Parquet file)."""
    key = stat.path
    path = storage.local_path(key)
    source: Any = path if path is not None else pa.BufferReader(storage.read(key))
    virtual = set(config.virtual_columns)
    with pq.ParquetFile(source, memory_map=path is not None) as parquet:
        table = parquet.read(columns=[n for n in schema.names if n not in virtual])
    table = config.with_virtual(table, key, stat.file_group.partition_path, schema.names)
    return table if table.schema.equals(schema) else table.select(schema.names).cast(schema)
