"""The one check of an input schema against a table schema, in two modes.

- ``exact``: every needed column has the table's type (``Table.write``: the caller hands
  Arrow data and can cast it; a silent cast could lose values unnoticed);
- ``castable``: every needed column's type has a cast to the table's type (the Spark writer:
  Spark sends its own Arrow types, ``LongType`` for an int32 column, a zoned timestamp for a
  naive one; whether the *values* fit is checked per batch with ``values_fit``).

In both modes the columns the operation needs must be there (a delete needs only the record
key and the partition columns, and may carry others), no column may be missing from the table
(except for a delete) and no name may repeat. A mismatch raises ``SchemaMismatchError`` saying
what was expected, what was found and what to do; nothing has touched the table yet.

Castability is decided here only: ``castable`` for types, ``values_fit`` for values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import pyarrow as pa

from lakewarden.errors import NonRetryableError
from lakewarden.table.config import TableConfig

SchemaMode = Literal["exact", "castable"]

_HELP: dict[SchemaMode, str] = {
    "exact": "cast or select the input to the table schema",
    "castable": "select and cast the DataFrame to the table schema",
}


class SchemaMismatchError(NonRetryableError):
    """The input's columns or types do not match the table schema.

    ``expected`` lists the needed columns as ``name: type``, ``found`` the problems
    (``missing columns [...]``, ``wrong types [...]``, ...), ``mode`` the check that failed."""

    def __init__(
        self,
        message: str,
        *,
        table: str,
        mode: SchemaMode,
        expected: Sequence[str],
        found: Sequence[str],
    ) -> None:
        super().__init__(message, table=table)
        self.mode = mode
        self.expected = tuple(expected)
        self.found = tuple(found)


def needed_columns(config: TableConfig, operation: str) -> list[str]:
    """The columns ``operation`` needs from its input, in table order for writes."""
    if operation == "delete":
        return [config.record_key, *config.partition_by]
    return list(config.pa_schema.names)


def check_input_schema(
    got: pa.Schema, config: TableConfig, operation: str, *, mode: SchemaMode
) -> None:
    """Check the input schema ``got`` of ``operation`` against the table's.

    Raises: SchemaMismatchError (nothing has been written)."""
    want = config.pa_schema
    needed = needed_columns(config, operation)
    found = _problems(got, want, needed, operation, mode)
    if not found:
        return
    expected = [f"{n}: {want.field(n).type}" for n in needed]
    types = "these types" if mode == "exact" else "types that cast to these"
    raise SchemaMismatchError(
        f"{operation} input does not match the schema of table {config.name!r}: expected "
        f"columns {expected} ({types}); found {'; '.join(found)}. Help: {_HELP[mode]} "
        f"({want.names}); nothing was written.",
        table=config.name,
        mode=mode,
        expected=expected,
        found=found,
    )


def _problems(
    got: pa.Schema, want: pa.Schema, needed: Sequence[str], operation: str, mode: SchemaMode
) -> list[str]:
    missing = [n for n in needed if n not in got.names]
    extra = [n for n in got.names if n not in want.names] if operation != "delete" else []
    dupes = sorted({n for n in got.names if got.names.count(n) > 1})
    fits = _same_type if mode == "exact" else castable
    wrong = [
        f"{n}: {got.field(n).type} (table: {want.field(n).type})"
        for n in needed
        if n in got.names and n not in dupes and not fits(got.field(n).type, want.field(n).type)
    ]
    wrong_label = "wrong types" if mode == "exact" else "types that cannot be cast"
    problems = [
        f"missing columns {missing}" if missing else "",
        f"columns not in the table {extra}" if extra else "",
        f"duplicate columns {dupes}" if dupes else "",
        f"{wrong_label} {wrong}" if wrong else "",
    ]
    return [p for p in problems if p]


def _same_type(source: pa.DataType, target: pa.DataType) -> bool:
    return bool(source.equals(target))


def castable(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether Arrow has a cast from ``source`` to ``target`` (values may still not fit)."""
    return source.equals(target) or values_fit(pa.array([], source), target)


def values_fit(values: pa.Array | pa.ChunkedArray, target: pa.DataType) -> bool:
    """Whether every value of ``values`` casts safely to ``target`` (no overflow, no lost
    digits or fractions)."""
    try:
        values.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    return True
