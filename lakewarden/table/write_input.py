"""The input of a write checked against the table schema, before anything touches the table.

``validate_input`` conforms an Arrow table to the table schema: the columns the operation
needs, no extra ones, equal types (``lakewarden.table.schema_check``, mode ``exact``); every
record has a non-null record key and non-null values in required fields. A mismatch is
``SchemaMismatchError``, a bad record ``InvalidRecordError`` naming it; either way nothing was
written. ``split_bad_records`` checks the same and returns the bad records instead of raising
(``Table.write(bad_records="skip" | "error-table")``); a schema mismatch still raises.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from lakewarden.errors import NonRetryableError
from lakewarden.table.config import TableConfig
from lakewarden.table.python_rows import python_rows
from lakewarden.table.schema_check import SchemaMismatchError, check_input_schema, needed_columns

__all__ = [
    "OPERATIONS",
    "BadRecords",
    "InvalidRecordError",
    "SchemaMismatchError",
    "split_bad_records",
    "validate_input",
]

OPERATIONS: tuple[str, ...] = ("insert", "upsert", "delete")
_MAX_REPR = 300


class InvalidRecordError(NonRetryableError):
    """A record cannot be written (null record key, null in a required field).

    ``record_index`` is its row number in the input, ``record`` its values."""

    def __init__(self, message: str, *, table: str, record_index: int, record: object) -> None:
        super().__init__(message, table=table)
        self.record_index = record_index
        self.record = record


def validate_input(data: pa.Table, config: TableConfig, operation: str) -> pa.Table:
    """The input conformed to the table schema (column order, schema metadata).

    Delete needs only the record key and the partition columns; other columns are dropped.
    Raises: SchemaMismatchError, InvalidRecordError, ValueError (unknown operation)."""
    if operation not in OPERATIONS:
        raise ValueError(f"operation must be one of {', '.join(OPERATIONS)}, got {operation!r}")
    schema = config.pa_schema
    needed = needed_columns(config, operation)
    check_input_schema(data.schema, config, operation, mode="exact")
    data = data.select(needed)
    _check_not_null(data, config.record_key, "has a null record key", config)
    for field in schema:
        if not field.nullable and field.name in data.column_names:
            problem = f"has a null in required field {field.name!r}"
            _check_not_null(data, field.name, problem, config)
    if operation != "delete":
        data = data.cast(schema)  # types are equal; this only sets metadata and nullability
    return data


def _check_not_null(data: pa.Table, column: str, problem: str, config: TableConfig) -> None:
    values = data.column(column)
    if values.null_count == 0:
        return
    index = pc.index(pc.is_null(values), True).as_py()
    record = python_rows(data.slice(index, 1))[0]
    shown = repr(record)
    shown = shown if len(shown) <= _MAX_REPR else shown[:_MAX_REPR] + "...}"
    raise InvalidRecordError(
        f"record {index} {problem} (record key field {config.record_key!r}): {shown}. "
        f"{values.null_count} record(s) of the input have this problem; nothing was written.",
        table=config.name,
        record_index=index,
        record=record,
    )


@dataclass(frozen=True)
class BadRecords:
    """The records of an input a write cannot take: their row numbers in the input, why, and
    the records themselves (the input's columns)."""

    indices: tuple[int, ...]
    reasons: tuple[str, ...]
    records: pa.Table

    def __len__(self) -> int:
        return len(self.indices)


def split_bad_records(
    data: pa.Table, config: TableConfig, operation: str
) -> tuple[pa.Table, BadRecords]:
    """``validate_input`` that sets the bad records apart instead of failing on the first:
    the conformed good records, and the bad ones (a null record key, or a null in a required
    field; the first problem of a record names it).

    Raises: SchemaMismatchError, ValueError (unknown operation): the input as a whole is
    wrong, so no record is written."""
    if operation not in OPERATIONS:
        raise ValueError(f"operation must be one of {', '.join(OPERATIONS)}, got {operation!r}")
    check_input_schema(data.schema, config, operation, mode="exact")
    data = data.select(needed_columns(config, operation))
    checks = [(config.record_key, "has a null record key")]
    checks += [
        (f.name, f"has a null in required field {f.name!r}")
        for f in config.pa_schema
        if not f.nullable and f.name in data.column_names and f.name != config.record_key
    ]
    why: dict[int, str] = {}
    for column, problem in checks:
        values = data.column(column)
        if values.null_count:
            nulls = pc.indices_nonzero(pc.is_null(values)).to_pylist()
            for index in nulls:
                why.setdefault(index, problem)
    indices = tuple(sorted(why))
    if not indices:
        return validate_input(data, config, operation), BadRecords((), (), data.slice(0, 0))
    bad = BadRecords(indices, tuple(why[i] for i in indices), data.take(list(indices)))
    keep = pc.invert(pa.array([i in why for i in range(len(data))], pa.bool_()))
    return validate_input(data.filter(keep), config, operation), bad
