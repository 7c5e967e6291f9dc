"""Ingestion steps 2-4 on Kafka-shaped rows (no broker): parsing into the table schema, the
reason of every kind of bad record, and the fail / skip policies."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from _spark_helpers import make_table

from lakewarden.spark._ingest_records import parse_records, route_bad_records
from lakewarden.spark.ingest import AvroValueCodec, read_bad_records

pytestmark = pytest.mark.spark

NAMES = ["id", "region", "ts", "amount", "note"]
GOOD = [
    b'{"id": 1, "region": "eu", "ts": 5, "amount": 1.5, "note": "a"}',
    b'{"id": 2, "region": "us", "ts": 6, "amount": 2, "extra": true}',  # extra ignored
]
BAD = {
    b"not json at all": "malformed JSON, or a value that does not fit the table schema",
    b"[1, 2]": "malformed JSON, or a value that does not fit the table schema",
    b'{"id": 3, "amount": "lots"}': "malformed JSON, or a value that does not fit the table schema",
    b'{"id": 99999999999999999999}': "malformed JSON, or a value that does not fit the table "
    "schema",
    b'{"region": "eu", "amount": 1.0}': "missing record key 'id'",
    b'{"id": null, "region": "eu"}': "missing record key 'id'",
    b"": "not a JSON object",
}


def _kafka_rows(spark: Any, values: list[bytes | None]) -> Any:
    stamp = dt.datetime(2025, 3, 14, tzinfo=dt.UTC)
    rows = [("t", 0, offset, stamp, None, value) for offset, value in enumerate(values)]
    schema = (
        "topic string, partition int, offset long, timestamp timestamp, key binary, value binary"
    )
    return spark.createDataFrame(rows, schema=schema).coalesce(1)


def _values() -> list[bytes | None]:
    return [GOOD[0], *BAD, GOOD[1], None]


def test_parse_gives_table_columns_and_a_reason_for_every_bad_record(
    spark: Any, tmp_path: Path
) -> None:
    config = make_table(tmp_path / "t").config
    values = _values()
    parsed = parse_records(_kafka_rows(spark, values), config).collect()
    reasons = {row["offset"]: row["_lw_bad_reason"] for row in parsed}
    null_value = "empty message (null value)"
    expected = {i: null_value if v is None else BAD.get(v) for i, v in enumerate(values)}
    assert expected[0] is None and expected[len(values) - 2] is None  # the good ones
    assert reasons == expected
    first = next(row for row in parsed if row["offset"] == 0)
    assert [first[name] for name in NAMES] == [1, "eu", 5, 1.5, "a"]


def test_skip_writes_each_bad_record_once_with_its_coordinates(spark: Any, tmp_path: Path) -> None:
    config = make_table(tmp_path / "t").config
    values = _values()
    parsed = parse_records(_kafka_rows(spark, values), config)
    good = route_bad_records(parsed, "skip", tmp_path / "bad", NAMES)
    assert good.columns == NAMES
    assert sorted(r["id"] for r in good.collect()) == [1, 2]
    good.collect()  # a rerun rewrites the same file: still one line per bad record
    bad = read_bad_records(tmp_path / "bad")
    bad_offsets = [i for i, v in enumerate(values) if v is None or v in BAD]
    assert sorted(r["offset"] for r in bad) == bad_offsets
    line = next(r for r in bad if r["offset"] == 1)
    assert line["topic"] == "t" and line["partition"] == 0 and line["value"] == "not json at all"
    assert line["reason"].startswith("malformed JSON") and line["batch_id"] is None


def test_fail_names_the_first_bad_record(spark: Any, tmp_path: Path) -> None:
    config = make_table(tmp_path / "t").config
    parsed = parse_records(_kafka_rows(spark, _values()), config)
    good = route_bad_records(
        parsed, "fail", tmp_path / "bad", ["id", "region", "ts", "amount", "note"]
    )
    with pytest.raises(Exception, match="bad record at topic t partition 0 offset 1: malformed"):
        good.collect()
    assert not (tmp_path / "bad").exists()


def test_avro_values_parse_and_bad_ones_are_skipped_with_their_reason(
    spark: Any, tmp_path: Path
) -> None:
    config = make_table(tmp_path / "t").config
    codec = AvroValueCodec.for_table(config)
    row = {"id": 7, "region": "eu", "ts": 5, "amount": 1.5, "note": None}
    values: list[bytes | None] = [codec.encode(row), b"junk", codec.header + b"\xff", None]
    parsed = parse_records(_kafka_rows(spark, values), config, "avro")
    reasons = {r["offset"]: r["_lw_bad_reason"] for r in parsed.collect()}
    assert reasons == {
        0: None,
        1: "bad avro header",
        2: "corrupt avro body",
        3: "empty message (null value)",
    }
    good = route_bad_records(parsed, "skip", tmp_path / "bad", NAMES)
    assert [r.asDict() for r in good.collect()] == [row]
    bad = sorted(read_bad_records(tmp_path / "bad"), key=lambda r: r["offset"])
    assert [(r["offset"], r["value"]) for r in bad] == [
        (1, b"junk".hex()),
        (2, (codec.header + b"\xff").hex()),
        (3, None),
    ]


def test_avro_fail_names_the_bad_record(spark: Any, tmp_path: Path) -> None:
    config = make_table(tmp_path / "t").config
    codec = AvroValueCodec.for_table(config)
    other = codec.header[:2] + b"\x00" * 8 + b"\x02"
    parsed = parse_records(_kafka_rows(spark, [other]), config, "avro")
    good = route_bad_records(parsed, "fail", tmp_path / "bad", NAMES)
    with pytest.raises(Exception, match="offset 0: unknown avro schema fingerprint 0000"):
        good.collect()
