"""``spark.read.format("lakewarden").load(uri)``: a snapshot (or the changes since an instant)
read as Arrow batches.

Planning (``partitions``, on the driver) loads the timeline once and fixes the files: one input
partition per base file of the snapshot as of ``as_of`` (default: the latest completed
instant), so every task of one query reads the same snapshot however long the query runs.
With ``since`` the files are the latest slices written by the instants completed after it,
and each task keeps only the records whose ``_lw_commit_time`` is one of those instants (the
same rule as ``Table.changes``). Tasks stream each file with ``pyarrow.parquet`` batch by batch
and cast to the Arrow types Spark expects.

Merge-on-read slices (a base file with log files) are one input partition each: the task reads
the slice through the Python merge (``lakewarden.table.mor.read_slice``: the base file and the
log blocks the statistics name), so Spark sees each record once, in its latest version.

``lakewarden.spark.read`` (``_fast_read``) hands the plain Parquet files to Spark's own reader and
uses this source only for the merge-on-read slices with log blocks. With the format's JVM side
in the session (``register``), ``spark.read.format("lakewarden")`` comes here only for what
that side does not take (``LakewardenSource.java``: no read manifest vouches for the snapshot,
``since``, ``filters``, S3).

Pushdown: PySpark 4.0.1's ``DataSourceReader`` receives neither the pruned columns nor the
filters (``pushFilters`` arrives with Spark 4.1), so Spark prunes and filters after the read.
``option("columns", "a,b")`` narrows the schema itself, which does prune the Parquet read, and
``option("filters", json)`` (``_pushdown``) drops the slices and files of partitions it
excludes at planning and filters the rows of the rest (merge-on-read slices after the merge).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from lakewarden.spark import _worker_heap
from lakewarden.spark._arrow import spark_arrow_schema, spark_schema
from lakewarden.spark._options import ReadSpec
from lakewarden.spark._pushdown import filters_expression
from lakewarden.spark._read_plan import plan_read
from lakewarden.storage import Storage, open_storage
from lakewarden.table.config import (
    META_COMMIT_TIME,
    VIRTUAL_META_COLUMNS,
    TableConfig,
    load_config,
)
from lakewarden.table.mor import read_slice
from lakewarden.table.reader import ColumnNotFoundError, prune_files, prune_slices
from lakewarden.table.snapshot import FileSlice
from lakewarden.table.stats import WriteStat

BATCH_ROWS = 65_536


class FilePartition(InputPartition):
    """One base file to read (picklable)."""

    def __init__(
        self,
        key: str,
        size_bytes: int,
        num_records: int,
        instants: tuple[str, ...] | None,
        partition_path: str = "",
    ) -> None:
        super().__init__(key)
        self.key = key
        # The file's partition: ``_lw_partition_path`` where the file leaves it out.
        self.partition_path = partition_path
        self.size_bytes = size_bytes
        self.num_records = num_records
        # Incremental reads: keep only the records these instants wrote.
        self.instants = instants


class SlicePartition(InputPartition):
    """One merge-on-read file slice to merge and read (picklable)."""

    def __init__(self, file_slice: FileSlice, instants: tuple[str, ...] | None) -> None:
        super().__init__(str(file_slice.file_group))
        self.file_slice = file_slice
        self.instants = instants


def table_schema(spec: ReadSpec) -> StructType:
    """The Spark schema of the table, narrowed to ``columns`` when given.

    Raises: NotATableError, ColumnNotFoundError."""
    config = load_config(open_storage(spec.uri, spec.settings()))
    return spark_schema(table_arrow_schema(config, spec.columns))


def table_arrow_schema(config: TableConfig, columns: Sequence[str] | None) -> pa.Schema:
    """The table's Arrow schema, narrowed to ``columns`` when given.

    Raises: ColumnNotFoundError."""
    schema = config.pa_schema
    if columns is None:
        return schema
    unknown = [c for c in columns if c not in schema.names]
    if unknown:
        raise ColumnNotFoundError(
            f"table {config.name!r} has no columns {unknown}; its columns are {schema.names}",
            table=config.name,
        )
    return pa.schema([schema.field(c) for c in columns])


def plan_files(
    storage: Storage, config: TableConfig, spec: ReadSpec
) -> tuple[list[WriteStat], list[FileSlice], tuple[str, ...] | None]:
    """The base files to read, the merge-on-read slices to merge and read, and, for an
    incremental read, the instants whose records to keep (``_read_plan.plan_read``). With
    ``merged_only`` (``lakewarden.spark.read`` reads the plain files itself) no base file.

    Raises: InstantNotCompletedError."""
    plan = plan_read(storage, config, as_of=spec.as_of, since=spec.since, until=spec.until)
    files = [] if spec.merged_only else list(plan.files)
    return files, list(plan.merged), plan.instants


class LakewardenReader(DataSourceReader):
    """Pickled to the tasks: holds the spec and the output schema, never a client. (Planning
    may run in another process than the one whose reader is pickled: what it finds travels
    in the partitions.)"""

    def __init__(self, spec: ReadSpec, schema: StructType) -> None:
        """Raises: InvalidOptionError (a bad ``filters`` option)."""
        self.spec = spec
        self.arrow_schema = spark_arrow_schema(schema)
        filters_expression(spec.filters)  # a bad option fails the query before it plans

    def partitions(self) -> Sequence[InputPartition]:
        """Raises: NotATableError, InstantNotCompletedError."""
        storage = open_storage(self.spec.uri, self.spec.settings())
        config = load_config(storage)
        files, merged, instants = plan_files(storage, config, self.spec)
        condition = filters_expression(self.spec.filters)
        files = prune_files(storage, config, files, condition)
        merged = prune_slices(storage, config, merged, condition)
        plain: list[InputPartition] = [
            FilePartition(
                f.path, f.size_bytes, f.num_records, instants, f.file_group.partition_path
            )
            for f in files
        ]
        return plain + [SlicePartition(s, instants) for s in merged]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Raises: MissingCommittedBlockError (merge-on-read), StorageError."""
        _worker_heap.settle()
        if isinstance(partition, SlicePartition):
            yield from self._read_slice(partition)
            return
        if not isinstance(partition, FilePartition):
            return  # no files: Spark plans one partition of its own, which reads nothing
        storage = open_storage(self.spec.uri, self.spec.settings())
        condition = filters_expression(self.spec.filters)
        names = list(self.arrow_schema.names)
        virtual = any(n in VIRTUAL_META_COLUMNS for n in names)
        config = load_config(storage) if condition is not None or virtual else None
        columns = _file_columns(config, names, filtered=condition is not None)
        # What the file leaves out is filled from its key before the filter, which may name it.
        filling = config if config is not None and config.virtual_columns else None
        instants = partition.instants
        if instants is not None:
            columns.append(META_COMMIT_TIME)
        wanted = pa.array(instants or (), pa.string())
        with pq.ParquetFile(_source(storage, partition.key)) as parquet:
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=columns):
                if instants is not None:
                    batch = batch.filter(pc.is_in(batch.column(META_COMMIT_TIME), wanted))
                if not batch.num_rows:
                    continue
                if filling is not None:
                    batch = _with_virtual(filling, batch, partition)
                if condition is not None:
                    batch = batch.filter(condition)
                if batch.num_rows:
                    yield batch.select(names).cast(self.arrow_schema)

    def _read_slice(self, partition: SlicePartition) -> Iterator[pa.RecordBatch]:
        storage = open_storage(self.spec.uri, self.spec.settings())
        config = load_config(storage)
        condition = filters_expression(self.spec.filters)
        # Only the columns read and what the filters name: the merge decodes no other.
        columns = list(self.arrow_schema.names if condition is None else config.pa_schema.names)
        if partition.instants is not None:
            columns.append(META_COMMIT_TIME)
        records = read_slice(storage, config, partition.file_slice, columns=columns)
        if partition.instants is not None:
            wanted = pa.array(partition.instants, pa.string())
            records = records.filter(pc.is_in(records.column(META_COMMIT_TIME), wanted))
        if condition is not None:
            records = records.filter(condition)
        records = records.select(self.arrow_schema.names).cast(self.arrow_schema)
        yield from records.to_batches(max_chunksize=BATCH_ROWS)


def _file_columns(config: TableConfig | None, names: Sequence[str], *, filtered: bool) -> list[str]:
    """The columns to read from a base file for the output ``names``: with a filter, every
    table column too (a filter may name columns outside the output); never a column the
    file leaves out (``TableConfig.virtual_columns``: filled from the file's key)."""
    if config is None:
        return list(names)
    wanted = [*config.pa_schema.names, *names] if filtered else names
    return [c for c in dict.fromkeys(wanted) if c not in config.virtual_columns]


def _with_virtual(
    config: TableConfig, batch: pa.RecordBatch, partition: FilePartition
) -> pa.RecordBatch:
    """``batch`` of the file ``partition`` reads, with the meta columns the file leaves out
    filled from its key (``TableConfig.with_virtual``)."""
    table = config.with_virtual(
        pa.Table.from_batches([batch]), partition.key, partition.partition_path
    )
    return table.combine_chunks().to_batches()[0]


def _source(storage: Storage, key: str) -> Any:
    path = storage.local_path(key)
    return path if path is not None else pa.BufferReader(storage.read(key))
