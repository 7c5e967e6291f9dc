"""Arrow rows as Python values, for messages and error records about bad input.

Arrow holds values Python cannot: a timestamp in year 11476 or a ``date32`` of 2**31 - 1 days
are valid Arrow (and Spark) values, but ``to_pylist`` raises ``OverflowError`` for them. Code
that describes a bad record (the error's message, the error table's copy of the record) must
not crash on such a value: that would replace the named error the user needs with an
unrelated one, and lose the record. So a value Python cannot hold is given as Arrow's own text
of it (``"11476-08-15 05:20:00.000000"``), and every other value as usual.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["python_rows", "python_values"]

# What a Python conversion of an out-of-range value raises (datetime, date, timedelta).
_UNREPRESENTABLE = (OverflowError, ValueError)


def python_rows(table: pa.Table) -> list[dict[str, Any]]:
    """``table.to_pylist()``, with Arrow's text for a value Python cannot hold."""
    try:
        rows: list[dict[str, Any]] = table.to_pylist()
        return rows
    except _UNREPRESENTABLE:
        columns = {name: python_values(table.column(name)) for name in table.column_names}
        return [
            {name: values[row] for name, values in columns.items()} for row in range(table.num_rows)
        ]


def python_values(values: pa.Array | pa.ChunkedArray) -> list[Any]:
    """``values.to_pylist()``, with Arrow's text for a value Python cannot hold."""
    try:
        converted: list[Any] = values.to_pylist()
        return converted
    except _UNREPRESENTABLE:
        array = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
        return [_value(array, index) for index in range(len(array))]


def _value(array: pa.Array, index: int) -> Any:
    try:
        return array[index].as_py()
    except _UNREPRESENTABLE:
        return _arrow_text(array.slice(index, 1))


def _arrow_text(one: pa.Array) -> str:
    """Arrow's own text of a one-value array (it formats any date, time or nested value)."""
    try:
        text = pc.cast(one, pa.string())[0].as_py()
        if isinstance(text, str):
            return text
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        pass
    # Nested types have no cast to string; the pretty printer still formats them.
    lines = (line.strip() for line in one.to_string(indent=0, window=16).splitlines())
    # Drop the printer's framing: the brackets and its "-- is_valid" / "-- child" headers.
    return " ".join(line for line in lines if line not in ("[", "]") and not line.startswith("--"))
