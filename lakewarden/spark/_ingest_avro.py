"""Avro values for ``lakewarden ingest --format avro``: one record of the *table's* schema per
Kafka value, in Avro single-object encoding (``C3 01`` + the 8-byte CRC-64-AVRO fingerprint of
the schema's canonical form + the schemaless body, the framing of ``lakewarden.events.codec``).

The Avro schema is derived from the table's Arrow schema (``avro_schema``): a nullable column
is a ``["null", T]`` union with default null. Spark's ``from_avro`` needs the spark-avro jar,
which is not shipped, so values are decoded in Python: ``AvroDecoder`` is the ``mapInArrow``
step that gives the same columns as the JSON path (table columns, Kafka coordinates with the
value as hex, and the bad-record reason).

    codec = AvroValueCodec.for_table(config)
    producer.produce(topic, codec.encode({"id": 1, "region": "eu", ...}))
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from io import BytesIO
from typing import Any, Final, cast

import pyarrow as pa
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import to_parsing_canonical_form

from lakewarden.errors import ConfigurationError
from lakewarden.events._schemas import crc64_avro
from lakewarden.table.config import TableConfig

MAGIC: Final = b"\xc3\x01"
HEADER_SIZE: Final = 10
BAD_HEADER: Final = "bad avro header"
UNKNOWN_FINGERPRINT: Final = "unknown avro schema fingerprint"
CORRUPT_BODY: Final = "corrupt avro body"
_REASON: Final = "_lw_bad_reason"  # _ingest_records.REASON (which imports this module)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class AvroSchemaError(ConfigurationError):
    """The table has a column that ``--format avro`` cannot carry."""


def _avro_type(field: pa.Field) -> Any:
    kind = field.type
    if pa.types.is_boolean(kind):
        return "boolean"
    if pa.types.is_int32(kind):
        return "int"
    if pa.types.is_int64(kind):
        return "long"
    if pa.types.is_float32(kind):
        return "float"
    if pa.types.is_float64(kind):
        return "double"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "string"
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return "bytes"
    if pa.types.is_date32(kind):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_timestamp(kind) and kind.unit in ("ms", "us"):
        local = "local-" if kind.tz is None else ""
        unit = "millis" if kind.unit == "ms" else "micros"
        return {"type": "long", "logicalType": f"{local}timestamp-{unit}"}
    raise AvroSchemaError(
        f"column {field.name!r} has type {kind}, which --format avro does not map. Help: use "
        "--format json, or a table of boolean, int32/64, float32/64, string, binary, date32 "
        "and ms/us timestamp columns."
    )


def avro_schema(schema: pa.Schema, name: str) -> dict[str, Any]:
    """The Avro record schema of a table's Arrow ``schema`` (record ``lakewarden.table.<name>``,
    non-name characters replaced by ``_``). Raises: AvroSchemaError."""
    fields: list[dict[str, Any]] = []
    for field in schema:
        if not _NAME.match(field.name):
            raise AvroSchemaError(f"column {field.name!r} is not a valid Avro field name.")
        kind = _avro_type(field)
        if field.nullable:
            fields.append({"name": field.name, "type": ["null", kind], "default": None})
        else:
            fields.append({"name": field.name, "type": kind})
    record = re.sub(r"[^A-Za-z0-9_]", "_", name)
    record = record if _NAME.match(record) else f"_{record}"
    return {"type": "record", "name": record, "namespace": "lakewarden.table", "fields": fields}


class AvroValueCodec:
    """Single-object encoding of one table's records; picklable (sent to the tasks)."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        self.parsed = cast(dict[str, Any], parse_schema(schema))
        self.fingerprint = crc64_avro(to_parsing_canonical_form(self.parsed))
        self.header = MAGIC + self.fingerprint

    @classmethod
    def for_table(cls, config: TableConfig) -> AvroValueCodec:
        """Raises: AvroSchemaError."""
        return cls(avro_schema(config.pa_schema, config.name))

    def encode(self, record: dict[str, Any]) -> bytes:
        """One Kafka value. Raises: ValueError/TypeError from fastavro (record does not fit)."""
        out = BytesIO()
        out.write(self.header)
        schemaless_writer(out, self.parsed, record)
        return out.getvalue()

    def decode(self, value: bytes) -> tuple[dict[str, Any] | None, str | None]:
        """``(record, None)``, or ``(None, reason)`` for a value that is not one record."""
        if len(value) < HEADER_SIZE or value[:2] != MAGIC:
            return None, BAD_HEADER
        if value[2:HEADER_SIZE] != self.fingerprint:
            return None, f"{UNKNOWN_FINGERPRINT} {value[2:HEADER_SIZE].hex()}"
        body = BytesIO(value[HEADER_SIZE:])
        try:
            record = schemaless_reader(body, self.parsed, None)
        except Exception:  # fastavro raises EOFError, ValueError, UnicodeDecodeError, ...
            return None, CORRUPT_BODY
        if body.tell() != len(value) - HEADER_SIZE or not isinstance(record, dict):
            return None, CORRUPT_BODY  # trailing bytes: not one record of this schema
        return record, None


class AvroDecoder:
    """``mapInArrow`` function: Kafka batches -> the table columns (``table_schema``, Spark's
    Arrow types), the Kafka coordinates (value as hex) and the bad-record reason column."""

    def __init__(self, codec: AvroValueCodec, table_schema: pa.Schema, record_key: str) -> None:
        self.codec = codec
        self.table_schema = table_schema
        self.record_key = record_key

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield self.decode_batch(batch)

    def decode_batch(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        rows: list[dict[str, Any]] = []
        reasons: list[str | None] = []
        for value in batch.column("value").to_pylist():
            record: dict[str, Any] | None = None
            reason: str | None = "empty message (null value)"
            if value is not None:
                record, reason = self.codec.decode(value)
            if record is not None and record.get(self.record_key) is None:
                record, reason = None, f"missing record key {self.record_key!r}"
            rows.append(record or {})
            reasons.append(reason)
        columns = [
            pa.array([row.get(f.name) for row in rows], type=f.type) for f in self.table_schema
        ]
        key, value = batch.column("key"), batch.column("value")
        kafka = [batch.column(name) for name in ("topic", "partition", "offset", "timestamp")]
        kafka += [_text(key.to_pylist(), utf8=True), _text(value.to_pylist(), utf8=False)]
        names = [*self.table_schema.names, "topic", "partition", "offset", "timestamp"]
        return pa.RecordBatch.from_arrays(
            [*columns, *kafka, pa.array(reasons, pa.string())],
            names=[*names, "key", "value", _REASON],
        )


def _text(values: list[bytes | None], *, utf8: bool) -> pa.Array:
    """Keys as UTF-8 text (as the JSON path casts them), Avro values as hex."""
    if utf8:
        return pa.array([None if v is None else v.decode(errors="replace") for v in values])
    return pa.array([None if v is None else v.hex() for v in values], pa.string())
