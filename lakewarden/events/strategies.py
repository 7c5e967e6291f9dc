"""Hypothesis strategies generating valid records for any Avro schema (test harness).

Needs the ``dev`` extra (hypothesis); nothing in the library imports this module. Values are
generated in the form the codec *decodes* to, so ``decode(encode(v)).record == v`` holds:
``timestamp-millis`` as UTC ``datetime`` with millisecond precision, no NaN floats.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from lakewarden.events._schemas import EventSchema

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def event_records(schema: EventSchema) -> st.SearchStrategy[dict[str, Any]]:
    """Records valid for ``schema`` (including its envelope)."""
    strategy: st.SearchStrategy[dict[str, Any]] = avro_values(schema.parsed)
    return strategy


def avro_values(schema: Any, named: dict[str, Any] | None = None) -> st.SearchStrategy[Any]:
    """Values valid for a parsed (fastavro ``parse_schema``) Avro schema.

    Raises:
        ValueError: a type this generator does not know.
    """
    named = {} if named is None else named
    if isinstance(schema, list):
        return st.one_of([avro_values(branch, named) for branch in schema])
    if isinstance(schema, str):
        if schema in named:
            return st.deferred(lambda: avro_values(named[schema], named))
        return _primitive(schema)
    if schema.get("logicalType") == "timestamp-millis":
        millis = st.integers(min_value=0, max_value=4_102_444_800_000)  # up to 2100
        return millis.map(lambda ms: _EPOCH + timedelta(milliseconds=ms))
    kind = schema["type"]
    if kind == "record":
        named[schema["name"]] = schema
        return st.fixed_dictionaries(
            {field["name"]: avro_values(field["type"], named) for field in schema["fields"]}
        )
    if kind == "enum":
        named[schema["name"]] = schema
        return st.sampled_from(schema["symbols"])
    if kind == "fixed":
        named[schema["name"]] = schema
        return st.binary(min_size=schema["size"], max_size=schema["size"])
    if kind == "array":
        return st.lists(avro_values(schema["items"], named), max_size=5)
    if kind == "map":
        return st.dictionaries(
            st.text(max_size=10), avro_values(schema["values"], named), max_size=5
        )
    return avro_values(kind, named)


def _primitive(name: str) -> st.SearchStrategy[Any]:
    strategies: dict[str, st.SearchStrategy[Any]] = {
        "null": st.none(),
        "boolean": st.booleans(),
        "int": st.integers(*_INT32),
        "long": st.integers(*_INT64),
        "float": st.floats(allow_nan=False, width=32),
        "double": st.floats(allow_nan=False),
        "bytes": st.binary(max_size=64),
        "string": st.text(max_size=40),
    }
    if name not in strategies:
        raise ValueError(f"No strategy for Avro type {name!r}")
    return strategies[name]
