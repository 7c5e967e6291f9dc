"""A table's Arrow schema as Delta Lake's JSON schema, and the protocol it needs.

Delta serialises a table schema as a JSON ``struct`` (the protocol's "Schema Serialization
Format"): each field has a ``name``, a ``type`` (a primitive name, or an ``array``, ``map`` or
``struct`` object), ``nullable`` and ``metadata``. lakewarden's meta columns are never part of
it (``TableConfig.pa_schema`` has only the user's columns); a reader given this schema reads
those columns of a data file and ignores the rest.

A timestamp without a time zone is Delta's ``timestamp_ntz``, which needs the
``timestampNtz`` table feature (reader 3 / writer 7); every other supported type is readable
with the plain protocol (reader 1 / writer 2). Unsigned integers, large lists, durations and
other types without a Delta counterpart are refused with ``UnpublishableSchemaError``.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from lakewarden.errors import ConfigurationError
from lakewarden.table.read_manifest import PRIMITIVE_TYPE_NAMES


class UnpublishableSchemaError(ConfigurationError):
    """A column's type has no Delta Lake counterpart, so the table cannot be published."""


def delta_type(t: pa.DataType, *, column: str = "") -> str | dict[str, Any]:
    """The Delta type of Arrow type ``t``. Raises: UnpublishableSchemaError."""
    for test, name in PRIMITIVE_TYPE_NAMES:
        if test(t):
            return name
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is not None else "timestamp_ntz"
    if pa.types.is_decimal(t) and t.precision <= 38:
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_list(t):
        return {
            "type": "array",
            "elementType": delta_type(t.value_type, column=column),
            "containsNull": t.value_field.nullable,
        }
    if pa.types.is_map(t):
        return {
            "type": "map",
            "keyType": delta_type(t.key_type, column=column),
            "valueType": delta_type(t.item_type, column=column),
            "valueContainsNull": t.item_field.nullable,
        }
    if pa.types.is_struct(t):
        return {"type": "struct", "fields": [_field(t.field(i)) for i in range(t.num_fields)]}
    raise UnpublishableSchemaError(
        f"column {column!r} has type {t}, which Delta Lake has no type for. Help: publish a "
        "table whose columns are booleans, signed integers, floats, strings, binary, dates, "
        "timestamps, decimals, lists, maps or structs, or leave publishing off.",
    )


def _field(f: pa.Field) -> dict[str, Any]:
    return {
        "name": f.name,
        "type": delta_type(f.type, column=f.name),
        "nullable": f.nullable,
        "metadata": {},
    }


def schema_string(schema: pa.Schema) -> str:
    """The ``schemaString`` of Delta's ``metaData`` action for ``schema`` (compact JSON).

    Raises: UnpublishableSchemaError."""
    struct = {"type": "struct", "fields": [_field(f) for f in schema]}
    return json.dumps(struct, separators=(",", ":"))


def _uses_ntz(t: pa.DataType) -> bool:
    if pa.types.is_timestamp(t):
        return t.tz is None
    if pa.types.is_list(t):
        return _uses_ntz(t.value_type)
    if pa.types.is_map(t):
        return _uses_ntz(t.key_type) or _uses_ntz(t.item_type)
    if pa.types.is_struct(t):
        return any(_uses_ntz(t.field(i).type) for i in range(t.num_fields))
    return False


def protocol_action(schema: pa.Schema) -> dict[str, Any]:
    """The ``protocol`` action: reader 1 / writer 2, or reader 3 / writer 7 with the
    ``timestampNtz`` feature when a column is a timestamp without a time zone."""
    if any(_uses_ntz(f.type) for f in schema):
        return {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": ["timestampNtz"],
            "writerFeatures": ["timestampNtz"],
        }
    return {"minReaderVersion": 1, "minWriterVersion": 2}
