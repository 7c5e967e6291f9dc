"""Schemas between Spark and the table, and input rows conformed to the table schema.

Spark sends a writer Arrow batches in *Spark's* Arrow types (``LongType`` is int64,
``TimestampType`` is ``timestamp[us, tz=<session zone>]``, every field nullable) and reads
back batches that must be exactly ``to_arrow_schema(<declared schema>)``. The table's schema
is its own (an int32 column, a naive timestamp, a non-null field). So:

- ``check_write_schema`` runs on the driver before anything touches the table: every column
  the operation needs is there, none is extra, and a cast from the Spark type to the table
  type exists (``lakewarden.table.schema_check``, mode ``castable``). A mismatch is a
  ``SchemaMismatchError`` and no instant is created.
- ``conform`` runs per batch in the task: the *values* must fit (an int64 that overflows an
  int32 column, a decimal that loses digits); the first row that does not is named in an
  ``InvalidRecordError``, as are null record keys and nulls in required fields
  (``lakewarden.table.write_input.validate_input``).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from lakewarden.table.config import TableConfig
from lakewarden.table.python_rows import python_rows
from lakewarden.table.schema_check import check_input_schema, needed_columns, values_fit
from lakewarden.table.write_input import InvalidRecordError, validate_input

_MAX_REPR = 300


def spark_schema(schema: pa.Schema) -> StructType:
    """The Spark schema of a table (or of some of its columns)."""
    return from_arrow_schema(schema)


def spark_arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark sends and expects for ``schema``."""
    return to_arrow_schema(schema)


def table_operation(operation: str) -> str:
    """The operation of ``lakewarden.table.writer`` whose input rules apply: appends
    (``bulk_insert``, overwrite) validate as inserts."""
    return operation if operation in ("upsert", "delete") else "insert"


def check_write_schema(
    incoming: StructType, config: TableConfig, operation: str, *, ignore: Sequence[str] = ()
) -> None:
    """The Spark schema, without the columns ``ignore`` (an ingestion's bad-record columns),
    checked in mode ``castable`` (``lakewarden.table.schema_check``).

    Raises: SchemaMismatchError (nothing has been written)."""
    schema = spark_arrow_schema(incoming)
    kept = pa.schema([f for f in schema if f.name not in ignore])
    check_input_schema(kept, config, operation, mode="castable")


def conform(
    batch: pa.Table, config: TableConfig, operation: str, *, first_row: int, where: str
) -> pa.Table:
    """``batch`` in the table's types, validated (``where`` names the task for messages;
    ``first_row`` is the row number of the batch's first row within the task's input).

    Raises: InvalidRecordError (the first bad row), SchemaMismatchError."""
    needed = needed_columns(config, operation)
    arrays = []
    for name in needed:
        target = config.pa_schema.field(name).type
        column = batch.column(name)
        if not column.type.equals(target):
            column = _cast_column(batch, name, target, config, first_row=first_row, where=where)
        arrays.append(column)
    typed = pa.table(arrays, schema=pa.schema([config.pa_schema.field(n) for n in needed]))
    try:
        return validate_input(typed, config, table_operation(operation))
    except InvalidRecordError as err:
        raise InvalidRecordError(
            f"{where}, row {first_row + err.record_index} of the task's input: {err}",
            table=config.name,
            record_index=first_row + err.record_index,
            record=err.record,
        ) from err


def _cast_column(
    batch: pa.Table,
    name: str,
    target: pa.DataType,
    config: TableConfig,
    *,
    first_row: int,
    where: str,
) -> pa.ChunkedArray:
    column = batch.column(name)
    try:
        return column.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        index = _first_bad_row(column.combine_chunks(), target)
        record = python_rows(batch.slice(index, 1))[0]
        shown = repr(record)
        shown = shown if len(shown) <= _MAX_REPR else shown[:_MAX_REPR] + "...}"
        raise InvalidRecordError(
            f"{where}, row {first_row + index} of the task's input: value "
            f"{record.get(name)!r} of column {name!r} does not fit the table type {target} "
            f"({err}): {shown}. Nothing of this write is committed.",
            table=config.name,
            record_index=first_row + index,
            record=record,
        ) from err


def _first_bad_row(values: pa.Array, target: pa.DataType) -> int:
    """The index of the first value that cannot be cast (bisection: log n casts)."""
    lo, hi = 0, len(values)  # the bad row is in [lo, hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if values_fit(values.slice(lo, mid - lo), target):
            lo = mid
        else:
            hi = mid
    return lo


def to_spark_batches(table: pa.Table, schema: pa.Schema, max_rows: int) -> Sequence[pa.RecordBatch]:
    """``table``'s columns of ``schema`` cast to it, as record batches for Spark."""
    selected = table.select(schema.names).cast(schema)
    batches: list[pa.RecordBatch] = selected.to_batches(max_chunksize=max_rows)
    return batches
