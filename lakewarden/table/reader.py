"""Reading a snapshot or the changes since an instant into a ``pyarrow.Table``.

The files come from the snapshot (``lakewarden.table.snapshot``), never from listing. They are
scanned as one ``pyarrow.dataset.FileSystemDataset`` whose fragments carry their partition
values as ``partition_expression``: a filter on partition columns skips whole files before
they are opened, other filters are pushed into the Parquet scan, and fragments are read in
parallel, so a read costs what ``pyarrow.parquet.read_table`` over the same files costs. A
partition column whose value every file's partition path fixes is not decoded from the files:
each batch gets its partition's value (``scan``).

IO goes through ``Storage``: on a local table pyarrow reads ``storage.local_path`` directly
(memory-mapped, parallel); elsewhere (S3) a read-only pyarrow filesystem adapter fetches each
fragment's object with ``storage.read`` when the scan opens it.

Merge-on-read slices (a base file with log files) cannot be scanned as files: the slices a
partition filter leaves are read (only the columns needed; their base files by one scan like
the one above) and merged by ``lakewarden.table.mor.read_slices``, then filtered and
projected, and appended to the scan of the plain slices.

Meta columns (``_lw_*``) are stripped unless ``with_meta=True`` or named in ``columns``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any, NoReturn

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lakewarden.errors import NonRetryableError
from lakewarden.storage import Storage
from lakewarden.table.bucket import MalformedPartitionPathError, parse_partition_path
from lakewarden.table.config import (
    META_COLUMNS,
    META_COMMIT_TIME,
    META_FILE_NAME,
    META_PARTITION_PATH,
    TableConfig,
)
from lakewarden.table.log_cache import LogCache
from lakewarden.table.snapshot import Changes, FileSlice, Snapshot
from lakewarden.table.stats import WriteStat

if TYPE_CHECKING:
    import pyarrow.dataset as ds


@cache
def _parquet_format() -> ds.ParquetFileFormat:
    # pyarrow.dataset (and the pandas it imports) is imported on first use: a Spark task
    # worker imports this module to merge a bucket's base files, which needs neither, and
    # pays about 0.25 CPU s per fresh worker otherwise.
    import pyarrow.dataset as ds

    return ds.ParquetFileFormat()


class ColumnNotFoundError(NonRetryableError):
    """A read names a column the table does not have."""


class UnsupportedSliceError(NonRetryableError):
    """The snapshot holds files a reader cannot merge (a Spark read of log files that is not
    routed through the Python merge)."""


def read_data_file(
    storage: Storage,
    config: TableConfig,
    key: str,
    partition_path: str,
    *,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """One whole base file in the file schema, or its ``columns`` (the writer reads base files
    to merge them); the meta columns it leaves out are filled from ``key``."""
    path = storage.local_path(key)
    source: Any = path if path is not None else pa.BufferReader(storage.read(key))
    virtual = set(config.virtual_columns)
    selected = [c for c in columns if c not in virtual] if columns is not None else None
    # One file, so ``ParquetFile``, not ``pq.read_table``: that builds a dataset per call
    # (filesystem resolution, discovery), half the cost of reading a small base file, and a
    # small write reads one per bucket. No partitioning either: a path under "k=v/" must
    # not grow a dictionary column "k".
    with pq.ParquetFile(source) as file:
        table = file.read(columns=selected)
    return config.with_virtual(table, key, partition_path, columns)


def read_snapshot(
    storage: Storage,
    config: TableConfig,
    snapshot: Snapshot,
    *,
    columns: Sequence[str] | None = None,
    filter: pc.Expression | None = None,
    with_meta: bool = False,
    log_cache: LogCache | None = None,
) -> pa.Table:
    """The records of ``snapshot``; merge-on-read slices scan their log files through
    ``log_cache`` when given. Raises: ColumnNotFoundError, MissingCommittedBlockError."""
    merged = [s for s in snapshot.slices.values() if s.log_files]
    if not merged:
        return scan(storage, config, snapshot.base_files(), columns, filter, with_meta)
    plain = [s for s in snapshot.base_files() if not snapshot.slices[s.file_group].log_files]
    table = scan(storage, config, plain, columns, filter, with_meta)
    return _with_merged(storage, config, table, merged, columns, filter, with_meta, log_cache)


def _with_merged(
    storage: Storage,
    config: TableConfig,
    table: pa.Table,
    slices: Sequence[FileSlice],
    columns: Sequence[str] | None,
    filter: pc.Expression | None,
    with_meta: bool,
    log_cache: LogCache | None,
) -> pa.Table:
    """``table`` followed by the merged records of ``slices``, filtered and projected.

    Slices whose partition the filter excludes are not read; the others are merged reading
    only the columns the result and the filter need (the filter applies after the merge: a
    log record may change whether a record matches)."""
    # Imported here: lakewarden.table.mor merges with lakewarden.table.merge, which reads
    # base files through this module.
    from lakewarden.table.mor import read_slices

    selected = _columns(config, columns, with_meta)
    carried = _merge_columns(config, selected, filter)
    slices = prune_slices(storage, config, slices, filter)
    records = read_slices(storage, config, slices, columns=carried, cache=log_cache)
    merged = pa.concat_tables(records) if records else config.file_schema.empty_table()
    if filter is not None:
        merged = merged.filter(filter)
    return pa.concat_tables([table, merged.select(selected).cast(table.schema)])


def _merge_columns(
    config: TableConfig, selected: Sequence[str], filter: pc.Expression | None
) -> list[str]:
    """The columns a merged read carries: ``selected`` and what ``filter`` names. pyarrow does
    not list an expression's fields, so the table's columns and the commit time (incremental
    reads filter on it) are tried on an empty table, and every column if that fails."""
    if filter is None:
        return list(selected)
    names = set(selected) | set(config.pa_schema.names) | {META_COMMIT_TIME}
    likely = [n for n in config.file_schema.names if n in names]
    try:
        config.file_schema.empty_table().select(likely).filter(filter)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, KeyError):
        return list(config.file_schema.names)
    return likely


def prune_files(
    storage: Storage,
    config: TableConfig,
    files: Sequence[WriteStat],
    filter: pc.Expression | None,
) -> list[WriteStat]:
    """The data files whose partition ``filter`` does not exclude (decided from the
    partition values alone: no file is opened)."""
    if filter is None or not config.partition_by or not files:
        return list(files)
    # Fragments named by key, on the adapter that fetches through storage: pruning opens no
    # file, so it asks storage nothing (no local path of a file that may not be read).
    by_key = pafs.PyFileSystem(_StorageHandler(storage))
    dataset = _dataset(config, files, config.file_schema, by_key, str)
    kept = {fragment.path for fragment in dataset.get_fragments(filter=filter)}
    return [f for f in files if f.path in kept]


def prune_slices(
    storage: Storage,
    config: TableConfig,
    slices: Sequence[FileSlice],
    filter: pc.Expression | None,
) -> list[FileSlice]:
    """The slices whose partition ``filter`` does not exclude (every record of a file group
    has its partition's values, so this is decided before any file is read); a slice
    without a base file is kept."""
    stats = [s.base_file for s in slices if s.base_file is not None]
    kept = {f.path for f in prune_files(storage, config, stats, filter)}
    return [s for s in slices if s.base_file is None or s.base_file.path in kept]


def read_changes(
    storage: Storage,
    config: TableConfig,
    changes: Changes,
    *,
    columns: Sequence[str] | None = None,
    filter: pc.Expression | None = None,
    with_meta: bool = False,
    log_cache: LogCache | None = None,
) -> pa.Table:
    """The latest version of every record written by the instants of ``changes`` (Hudi's
    incremental query): the latest slices those instants wrote, restricted to the records whose
    ``_lw_commit_time`` is one of them. Deleted records do not appear. Log files are scanned
    through ``log_cache`` when given."""
    slices = changes.slices()
    stats = [s.base_file for s in slices if s.base_file is not None and not s.log_files]
    written = pc.field(META_COMMIT_TIME).isin(pa.array(changes.instants, pa.string()))
    combined = written if filter is None else written & filter
    table = scan(storage, config, stats, columns, combined, with_meta)
    merged = [s for s in slices if s.log_files]
    if not merged:
        return table
    return _with_merged(storage, config, table, merged, columns, combined, with_meta, log_cache)


def scan(
    storage: Storage,
    config: TableConfig,
    files: Sequence[WriteStat],
    columns: Sequence[str] | None,
    filter: pc.Expression | None,
    with_meta: bool,
) -> pa.Table:
    """Scan ``files`` as one dataset. Raises: ColumnNotFoundError.

    A partition column whose value every file's partition path fixes (``partition_values``)
    is not decoded from the files: each batch gets the value of its file's partition, as a
    scan of the same files with the column left out of them would."""
    selected = _columns(config, columns, with_meta)
    dataset = files_dataset(storage, config, files, config.file_schema)
    fixed = _fixed_partition_values(config, files, dataset.files, selected)
    if not fixed:
        return dataset.to_table(columns=selected, filter=filter)
    read = [c for c in selected if c not in config.partition_by]
    schema = pa.schema([dataset.schema.field(c) for c in selected])
    batches = []
    for tagged in dataset.scanner(columns=read, filter=filter).scan_batches():
        batch, values = tagged.record_batch, fixed[tagged.fragment.path]
        arrays = [
            pa.repeat(values[c], batch.num_rows) if c in values else batch.column(c)
            for c in selected
        ]
        batches.append(pa.RecordBatch.from_arrays(arrays, schema=schema))
    return pa.Table.from_batches(batches, schema=schema)


def _fixed_partition_values(
    config: TableConfig,
    files: Sequence[WriteStat],
    paths: Sequence[str],
    selected: Sequence[str],
) -> dict[str, dict[str, pa.Scalar]]:
    """Per fragment path (``paths``: the dataset's, in the order of ``files``), the values of
    the selected partition columns, when every file's partition path fixes all of them; else
    empty (the files are read whole)."""
    wanted = [c for c in config.partition_by if c in selected]
    if not wanted or not files:
        return {}
    by_partition: dict[str, dict[str, pa.Scalar]] = {}
    fixed: dict[str, dict[str, pa.Scalar]] = {}
    for stat, path in zip(files, paths, strict=True):
        partition = stat.file_group.partition_path
        if partition not in by_partition:
            known = partition_values(config, partition)
            if any(c not in known for c in wanted):
                return {}
            by_partition[partition] = {c: known[c] for c in wanted}
        fixed[path] = by_partition[partition]
    return fixed


def files_dataset(
    storage: Storage, config: TableConfig, files: Sequence[WriteStat], schema: pa.Schema
) -> ds.FileSystemDataset:
    """A dataset over exactly ``files`` (no listing), with ``schema`` (the file schema, or the
    table's columns only: columns of the files not in it are not read). Each fragment carries
    its partition values, so a filter on a partition column skips whole files."""
    return _dataset(config, files, schema, *_filesystem(storage, files))


def _dataset(
    config: TableConfig,
    files: Sequence[WriteStat],
    schema: pa.Schema,
    filesystem: pafs.FileSystem,
    to_path: Callable[[str], str],
) -> ds.FileSystemDataset:
    import pyarrow.dataset as ds

    parquet = _parquet_format()
    fragments = [
        parquet.make_fragment(
            to_path(stat.path),
            filesystem=filesystem,
            partition_expression=_file_expression(config, stat),
            file_size=stat.size_bytes,
        )
        for stat in files
    ]
    return ds.FileSystemDataset(fragments, schema, parquet, filesystem)


def _file_expression(config: TableConfig, stat: WriteStat) -> pc.Expression:
    """What every record of the file ``stat`` satisfies: its partition values and, for the
    meta columns the file leaves out (``TableConfig.virtual_columns``), the values its key
    gives; the scan fills a column missing from a file from this expression."""
    partition = stat.file_group.partition_path
    condition = partition_expression(config, partition)
    if META_PARTITION_PATH in config.virtual_columns:
        condition = condition & (pc.field(META_PARTITION_PATH) == partition)
    if META_FILE_NAME in config.virtual_columns:
        condition = condition & (pc.field(META_FILE_NAME) == stat.path.rsplit("/", 1)[-1])
    return condition


def _columns(config: TableConfig, columns: Sequence[str] | None, with_meta: bool) -> list[str]:
    if columns is None:
        return list(config.file_schema.names if with_meta else config.pa_schema.names)
    known = list(config.file_schema.names)
    unknown = [c for c in columns if c not in known]
    if unknown:
        raise ColumnNotFoundError(
            f"table {config.name!r} has no columns {unknown}; its columns are "
            f"{config.pa_schema.names} (meta columns: {list(META_COLUMNS)})",
            table=config.name,
        )
    return list(columns)


def partition_expression(config: TableConfig, partition_path: str) -> pc.Expression:
    """What every record of a file in ``partition_path`` satisfies, for pruning.

    A value whose text does not round-trip through the column type gives no constraint
    (``True``): a wrong constraint would silently drop records, a missing one only costs a
    file read."""
    import pyarrow.dataset as ds

    condition: pc.Expression = ds.scalar(True)
    try:
        values = parse_partition_path(partition_path, config.partition_by)
    except MalformedPartitionPathError:
        return condition
    known = partition_values(config, partition_path)
    for name, text in zip(config.partition_by, values, strict=True):
        column = pc.field(name)
        if text is None:
            field_type = config.pa_schema.field(name).type
            empty = column == "" if pa.types.is_string(field_type) else ds.scalar(False)
            condition = condition & (column.is_null() | empty)
            continue
        if name in known:
            condition = condition & (column == known[name])
    return condition


def partition_values(config: TableConfig, partition_path: str) -> dict[str, pa.Scalar]:
    """The partition columns whose value ``partition_path`` fixes, as typed scalars: those
    ``partition_expression`` constrains by equality. A scan of a file in that partition
    gives every record this value (pyarrow takes it from the fragment's partition
    expression, not from the file), so a reader may too. A null value, or one whose text
    does not round-trip through the column type, fixes nothing."""
    try:
        values = parse_partition_path(partition_path, config.partition_by)
    except MalformedPartitionPathError:
        return {}
    known: dict[str, pa.Scalar] = {}
    for name, text in zip(config.partition_by, values, strict=True):
        if text is None:
            continue
        try:
            value = pc.cast(pa.scalar(text), config.pa_schema.field(name).type)
            if pc.cast(value, pa.string()).as_py() != text:
                continue
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
        known[name] = value
    return known


def _filesystem(
    storage: Storage, files: Sequence[WriteStat]
) -> tuple[pafs.FileSystem, Callable[[str], str]]:
    """A pyarrow filesystem for the files and the function mapping a key to its path."""
    if not files or storage.capabilities.local_paths:

        def local(key: str) -> str:
            path = storage.local_path(key)
            assert path is not None  # one backend serves every key of a table
            return path

        return pafs.LocalFileSystem(use_mmap=True), local
    return pafs.PyFileSystem(_StorageHandler(storage)), str


class _StorageHandler(pafs.FileSystemHandler):  # type: ignore[misc]
    """Read-only pyarrow filesystem over a ``Storage`` (fragments know their sizes, so only
    ``open_input_file`` is on the read path)."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    def get_type_name(self) -> str:
        return f"lakewarden+{self._storage.uri}"

    def normalize_path(self, path: str) -> str:
        return path

    def equals(self, other: object) -> bool:
        return isinstance(other, _StorageHandler) and other._storage is self._storage

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        infos = []
        for path in paths:
            info = self._storage.stat(path)
            infos.append(pafs.FileInfo(path, pafs.FileType.File, size=info.size))
        return infos

    def open_input_file(self, path: str) -> pa.NativeFile:
        return pa.BufferReader(self._storage.read(path))

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.open_input_file(path)

    def _read_only(self, *args: object, **kwargs: object) -> NoReturn:
        raise NotImplementedError("the lakewarden read adapter is read-only")

    get_file_info_selector = create_dir = delete_dir = delete_dir_contents = _read_only
    delete_root_dir_contents = delete_file = move = copy_file = _read_only
    open_output_stream = open_append_stream = _read_only
