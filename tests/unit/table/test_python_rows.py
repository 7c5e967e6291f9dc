"""Arrow rows as Python values when Python cannot hold a value (far-future timestamps)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from lakewarden.table import Table
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.python_rows import python_rows, python_values
from lakewarden.table.write_input import InvalidRecordError

FAR_US = 300_000_000_000_000_000  # 11476-08-15 05:20:00 UTC, past Python's year 9999


def test_values_python_can_hold_are_converted_as_usual() -> None:
    values = pa.array([0, None], pa.timestamp("us"))
    assert python_values(values) == [dt.datetime(1970, 1, 1), None]


def test_a_value_python_cannot_hold_becomes_arrow_text_and_the_rest_stay_values() -> None:
    table = pa.table(
        {
            "at": pa.array([FAR_US, 1], pa.timestamp("us")),
            "day": pa.array([2**31 - 1, 0], pa.date32()),
            "nested": pa.array(
                [{"t": FAR_US}, None], pa.struct([pa.field("t", pa.timestamp("us"))])
            ),
            "id": [1, 2],
        }
    )
    first, second = python_rows(table)
    assert first["at"] == "11476-08-15 05:20:00.000000"
    assert "2147483647" in first["day"]
    assert first["nested"] == "11476-08-15 05:20:00.000000"
    assert first["id"] == 1
    assert second == {
        "at": dt.datetime(1970, 1, 1, 0, 0, 0, 1),
        "day": dt.date(1970, 1, 1),
        "nested": None,
        "id": 2,
    }


def test_python_values_of_a_chunked_array() -> None:
    chunked = pa.chunked_array(
        [pa.array([FAR_US], pa.timestamp("us")), pa.array([None], pa.timestamp("us"))]
    )
    assert python_values(chunked) == ["11476-08-15 05:20:00.000000", None]


def test_a_record_with_a_null_key_and_a_far_future_timestamp_is_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    schema = pa.schema([("id", pa.int64()), ("at", pa.timestamp("us"))])
    table = Table.create(
        str(tmp_path / "t"),
        name="t",
        record_key="id",
        schema=schema,
        coordinator=EmbeddedCoordinator(),
    )
    data = pa.table(
        {"id": pa.array([None], pa.int64()), "at": pa.array([FAR_US], pa.timestamp("us"))}
    )
    with pytest.raises(InvalidRecordError, match="null record key") as raised:
        table.write(data)
    assert "11476-08-15" in str(raised.value)
