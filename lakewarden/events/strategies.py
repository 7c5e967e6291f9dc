"""Hypothesis strategies generating valid records for any Avro schema (test harness).

Needs the ``dev`` extra (hypothesis); nothing in the library imports this module. Values are
generated in the form the codec *decodes* to, so ``decode(encode(v)).record == v`` holds:
``timestamp-millis`` as UTC ``datetime`` with millisecond precision, no NaN floats.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from lakewarden.events._schemas import EventSchema
from lakewarden.extras import missing_extra

try:
    from hypothesis import strategies as st
except ImportError as err:
    raise missing_extra("dev", "The hypothesis strategies", err) from err

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


# Values a producer should never send but a schema allows: empty and 1 MB strings, NUL, huge
# and negative numbers (the fuzzers' "valid encoding with absurd values").
ABSURD_STRINGS = ("", "\x00", "../../../x", "x" * 1_000_000)
ABSURD_INTS = (-1, 0, 2**31 - 1, -(2**63), 2**63 - 1)


@st.composite
def damaged_messages(draw: st.DrawFn, name: str, base: dict[str, Any] | None = None) -> bytes:
    """Single-object-encoded ``name`` events, damaged: a bit flipped, truncated, another
    fingerprint, or a valid encoding of a record with absurd values in some fields (starting
    from ``base``, a realistic record, when given; else from any valid record).

    Raises:
        KeyError: ``name`` is not an event schema.
    """
    from lakewarden.events import default_codec, encode

    schema = default_codec().schemas.current[name]
    record = dict(base) if base is not None else draw(event_records(schema))
    kind = draw(st.sampled_from(["absurd", "absurd", "flip", "truncate", "fingerprint"]))
    if kind == "absurd":
        fields = [f for f in schema.parsed["fields"] if f["name"] != "envelope"]
        for field in draw(st.lists(st.sampled_from(fields), min_size=1, max_size=3)):
            record[field["name"]] = draw(_absurd_for(field["type"], record.get(field["name"])))
    data = bytearray(encode(name, record))
    # Positions are drawn independently of the length: ``base`` may differ between runs (fresh
    # ids), and hypothesis needs the same draws to replay an example.
    if kind == "flip":
        at = draw(st.integers(0, 2**20)) % len(data)
        data[at] ^= 1 << draw(st.integers(0, 7))
    elif kind == "truncate":
        del data[draw(st.integers(0, 2**20)) % len(data) :]
    elif kind == "fingerprint":
        data[2:10] = draw(st.binary(min_size=8, max_size=8))
    return bytes(data)


def _absurd_for(avro_type: Any, current: Any) -> st.SearchStrategy[Any]:
    """An absurd value of ``avro_type`` (the current value when the type has none)."""
    types = avro_type if isinstance(avro_type, list) else [avro_type]
    options: list[Any] = []
    for one in types:
        kind = one.get("type") if isinstance(one, dict) else one
        logical = one.get("logicalType") if isinstance(one, dict) else None
        if logical is not None:
            continue  # a timestamp's absurd values are covered by event_records' range
        if kind == "string":
            options += ABSURD_STRINGS
        elif kind in ("int", "long"):
            options += [v for v in ABSURD_INTS if kind == "long" or abs(v) < 2**31]
        elif kind == "null":
            options.append(None)
    return st.sampled_from(options) if options else st.just(current)
