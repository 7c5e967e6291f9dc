"""``--format avro`` without Spark: the table's Avro schema, single-object values, and the
reason of every kind of bad value."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from _spark_helpers import SCHEMA

from lakewarden.spark._arrow import spark_arrow_schema, spark_schema
from lakewarden.spark._ingest_avro import AvroDecoder
from lakewarden.spark.ingest import AvroSchemaError, AvroValueCodec, avro_schema

ROW = {"id": 1, "region": "eu", "ts": 5, "amount": 1.5, "note": None}


def _codec() -> AvroValueCodec:
    return AvroValueCodec(avro_schema(SCHEMA, "orders"))


def test_arrow_types_map_to_avro_and_nullable_columns_to_unions() -> None:
    schema = pa.schema(
        [
            pa.field("k", pa.int64(), nullable=False),
            ("i", pa.int32()),
            ("f", pa.float32()),
            ("b", pa.bool_()),
            ("raw", pa.binary()),
            ("d", pa.date32()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("local", pa.timestamp("ms")),
        ]
    )
    avro = avro_schema(schema, "my-table")
    assert (avro["name"], avro["namespace"]) == ("my_table", "lakewarden.table")
    assert avro["fields"][0] == {"name": "k", "type": "long"}
    assert [f["type"][1] for f in avro["fields"][1:]] == [
        "int",
        "float",
        "boolean",
        "bytes",
        {"type": "int", "logicalType": "date"},
        {"type": "long", "logicalType": "timestamp-micros"},
        {"type": "long", "logicalType": "local-timestamp-millis"},
    ]
    assert all(f["type"][0] == "null" and f["default"] is None for f in avro["fields"][1:])


@pytest.mark.parametrize("kind", [pa.int8(), pa.decimal128(10, 2), pa.list_(pa.int64())])
def test_unmapped_types_are_refused_naming_the_column(kind: pa.DataType) -> None:
    with pytest.raises(AvroSchemaError, match="column 'x' has type"):
        avro_schema(pa.schema([("x", kind)]), "t")


def test_values_are_single_object_encoded_and_round_trip() -> None:
    codec = _codec()
    value = codec.encode(ROW)
    assert value[:2] == b"\xc3\x01" and value[2:10] == codec.fingerprint and len(codec.header) == 10
    assert codec.decode(value) == (ROW, None)
    assert AvroValueCodec(avro_schema(SCHEMA, "orders")).fingerprint == codec.fingerprint


def test_timestamps_round_trip() -> None:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False), ("at", pa.timestamp("us"))])
    codec = AvroValueCodec(avro_schema(schema, "t"))
    row = {"k": 1, "at": dt.datetime(2025, 3, 14, 9, 26, 53, 589000)}
    assert codec.decode(codec.encode(row)) == (row, None)


def _bad_values() -> dict[bytes, str]:
    codec = _codec()
    good = codec.encode(ROW)
    other = AvroValueCodec(avro_schema(SCHEMA.remove(4), "orders")).encode(ROW)
    return {
        b"": "bad avro header",
        b'{"id": 1}': "bad avro header",
        good[:9]: "bad avro header",
        other: f"unknown avro schema fingerprint {other[2:10].hex()}",
        good[:12]: "corrupt avro body",
        good + b"\x00": "corrupt avro body",
        codec.header + b"\xff\xff\xff": "corrupt avro body",
    }


@pytest.mark.parametrize(("value", "reason"), list(_bad_values().items()))
def test_bad_values_have_a_reason(value: bytes, reason: str) -> None:
    assert _codec().decode(value) == (None, reason)


def test_decoder_gives_table_columns_kafka_coordinates_and_reasons() -> None:
    codec = _codec()
    values: list[bytes | None] = [codec.encode(ROW), b"junk", None]
    stamp = dt.datetime(2025, 3, 14, tzinfo=dt.UTC)
    batch = pa.RecordBatch.from_pydict(
        {
            "topic": ["t"] * 3,
            "partition": pa.array([0] * 3, pa.int32()),
            "offset": [0, 1, 2],
            "timestamp": pa.array([stamp] * 3, pa.timestamp("us", tz="UTC")),
            "key": [b"k", None, None],
            "value": pa.array(values, pa.binary()),
        }
    )
    table_schema = spark_arrow_schema(spark_schema(SCHEMA))
    out: Any = AvroDecoder(codec, table_schema, "id").decode_batch(batch).to_pylist()
    assert {k: out[0][k] for k in SCHEMA.names} == ROW
    assert (out[0]["key"], out[0]["_lw_bad_reason"], out[0]["value"]) == (
        "k",
        None,
        values[0].hex(),
    )  # type: ignore[union-attr]
    assert [r["_lw_bad_reason"] for r in out[1:]] == [
        "bad avro header",
        "empty message (null value)",
    ]
    assert out[1]["value"] == b"junk".hex() and out[1]["id"] is None
