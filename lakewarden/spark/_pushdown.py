"""Filters pushed into a ``lakewarden`` Spark read: ``option("filters", json)``.

PySpark 4.0's Python data sources are told neither the query's filters nor its columns
(``DataSourceReader.pushFilters`` arrives with Spark 4.1), so Spark filters every row the
source yields. Merge-on-read slices are merged in Python, and a filter known before the merge
saves work there: slices whose partition it excludes are never planned (no task, no file
read), and the others are filtered right after the merge, before their rows cross into the
JVM. Plain Parquet files are pruned by partition the same way and filtered batch by batch.

The option holds pyarrow's disjunctive normal form as JSON (``pyarrow.parquet.filters_to_
expression``): a list of ``[column, op, value]`` conditions, all of which must hold, or a list
of such lists, any of which may hold::

    spark.read.format("lakewarden").option("filters", '[["region", "=", "eu"], ["ts", ">", 5]]')

The filter applies to the merged records (a log block may change whether a record matches),
so the result is exactly ``Table.read(filter=...)``. Spark still applies its own filters on
top; the option narrows what the source reads, it never widens what the query sees.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakewarden.spark._options import OPT_FILTERS, InvalidOptionError

__all__ = ["filters_expression"]


def filters_expression(text: str | None) -> pc.Expression | None:
    """The pyarrow expression of the ``filters`` option (None: no option).

    Raises: InvalidOptionError (not JSON, or not pyarrow's filter form)."""
    if text is None or not text.strip():
        return None
    try:
        filters: Any = json.loads(text)
        return pq.filters_to_expression(_tuples(filters))
    except (ValueError, TypeError) as err:
        raise InvalidOptionError(
            f"option {OPT_FILTERS} must be JSON in pyarrow's filter form, a list of "
            '[column, op, value] (e.g. [["region", "=", "eu"], ["ts", ">", 5]]) or a list of '
            f"such lists (OR of ANDs); got {text!r}: {err}"
        ) from err


def _tuples(filters: Any) -> Any:
    """JSON arrays as the tuples ``filters_to_expression`` expects (a value list stays one)."""
    if not isinstance(filters, list) or not filters:
        raise ValueError("expected a non-empty list")
    if all(isinstance(f, list) and f and isinstance(f[0], list) for f in filters):
        return [[_condition(c) for c in conjunction] for conjunction in filters]
    return [_condition(c) for c in filters]


def _condition(condition: Any) -> tuple[str, str, Any]:
    if not (isinstance(condition, list) and len(condition) == 3 and isinstance(condition[0], str)):
        raise ValueError(f"a condition is [column, op, value], not {condition!r}")
    column, op, value = condition
    return column, str(op), value
