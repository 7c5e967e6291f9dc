"""Column types reach Delta readers intact: the schema, the protocol a type needs, and stats
that never exclude a row a filter should find."""

from __future__ import annotations

import datetime
import decimal
from pathlib import Path

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from delta_checks import commit_lines

from lakewarden.api.table import Table
from lakewarden.publish import UnpublishableSchemaError

TYPES = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("small", pa.int16()),
        pa.field("flag", pa.bool_()),
        pa.field("day", pa.date32()),
        pa.field("at", pa.timestamp("us", tz="UTC")),
        pa.field("local", pa.timestamp("us")),
        pa.field("price", pa.decimal128(10, 2)),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("attrs", pa.struct([("k", pa.string()), ("n", pa.int32())])),
        pa.field("blob", pa.binary()),
    ]
)


def data() -> pa.Table:
    at = datetime.datetime(2024, 3, 1, 12, 0, 0, 123456, tzinfo=datetime.UTC)
    return pa.table(
        {
            "id": [1, 2, 3],
            "small": [1, None, 3],
            "flag": [True, False, None],
            "day": [datetime.date(2024, 1, d) for d in (1, 15, 31)],
            "at": [at, at + datetime.timedelta(microseconds=1), None],
            "local": [at.replace(tzinfo=None)] * 3,
            "price": [decimal.Decimal("1.50"), None, decimal.Decimal("99.99")],
            "tags": [["a"], [], None],
            "attrs": [{"k": "x", "n": 1}, None, {"k": "y", "n": 2}],
            "blob": [b"\x00", b"", None],
        },
        schema=TYPES,
    )


def test_every_supported_type_reads_back_through_deltalake(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table = Table.create(str(root), name="t", record_key="id", schema=TYPES, publish_delta=True)
    table.write(data(), "insert")
    delta = deltalake.DeltaTable(str(root))
    # A timestamp without a time zone is timestamp_ntz: reader 3 / writer 7 with its feature.
    protocol = delta.protocol()
    assert protocol.min_reader_version == 3 and protocol.reader_features == ["timestampNtz"]
    got = delta.to_pyarrow_table().sort_by("id")
    expected = table.read().sort_by("id")
    for name in TYPES.names:
        assert got.column(name).to_pylist() == expected.column(name).to_pylist(), name
    # Filters that stats could wrongly prune: the max timestamp (microseconds past the
    # millisecond), the last date.
    at_max = expected.column("at")[1]
    assert delta.to_pyarrow_table(filters=[("at", "=", at_max.as_py())]).num_rows == 1
    found = delta.to_pyarrow_table(filters=[("day", "=", datetime.date(2024, 1, 31))])
    assert found.column("id").to_pylist() == [3]
    assert pc.sum(got.column("small")).as_py() == 4
    for column, value in [("flag", True), ("small", 3), ("price", decimal.Decimal("99.99"))]:
        assert delta.to_pyarrow_table(filters=[(column, "=", value)]).num_rows == 1, column


def test_stats_bounds_are_exact_or_wider_never_narrower(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table = Table.create(str(root), name="t", record_key="id", schema=TYPES, publish_delta=True)
    table.write(data(), "insert")
    import json

    (add,) = [a["add"] for a in commit_lines(root, 1) if "add" in a]
    stats = json.loads(add["stats"])
    assert stats["numRecords"] == 3
    # Timestamps in milliseconds: the minimum rounded down, the maximum (...123457) up.
    assert stats["minValues"] == {
        "id": 1,
        "small": 1,
        "flag": False,
        "day": "2024-01-01",
        "at": "2024-03-01T12:00:00.123Z",
        "local": "2024-03-01 12:00:00.123",
        "price": 1.5,
    }
    assert stats["maxValues"] == {
        "id": 3,
        "small": 3,
        "flag": True,
        "day": "2024-01-31",
        "at": "2024-03-01T12:00:00.124Z",
        "local": "2024-03-01 12:00:00.124",
        "price": 99.99,
    }
    assert stats["nullCount"]["small"] == 1 and stats["nullCount"]["at"] == 1
    assert "_lw_record_key" not in stats["nullCount"]


def test_a_type_delta_cannot_hold_is_refused_before_the_table_exists(tmp_path: Path) -> None:
    root = tmp_path / "t"
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("n", pa.uint32())])
    with pytest.raises(UnpublishableSchemaError, match="column 'n' has type uint32"):
        Table.create(str(root), name="t", record_key="id", schema=schema, publish_delta=True)
    assert not root.exists()
