"""Finding every bad row of a batch when the error table is on (no Spark session needed)."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakewarden.events.codec import default_codec
from lakewarden.spark import _bad_rows
from lakewarden.spark._bad_rows import BadRows, _bisect, _misfits, _uncastable, find_bad_rows
from lakewarden.spark._options import WriteSpec
from lakewarden.table.config import TableConfig

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("qty", pa.int32()),
        pa.field("region", pa.string(), nullable=False),
    ]
)
CONFIG = TableConfig.new(name="t", record_key="id", schema=SCHEMA, partition_by=["region"])


def test_clean_batch_has_no_bad_rows() -> None:
    batch = pa.table({"id": [1, 2], "qty": [1, 2], "region": ["eu", "us"]})
    assert find_bad_rows(batch, CONFIG, "insert") == {}


def test_every_bad_row_is_found_with_its_reason() -> None:
    n = 1000
    qty = list(range(n))
    ids: list[int | None] = list(range(n))
    for i in (3, 500, 999):
        qty[i] = 2**40  # does not fit int32
    ids[7] = None
    batch = pa.table(
        {"id": pa.array(ids, pa.int64()), "qty": pa.array(qty, pa.int64()), "region": ["eu"] * n}
    )
    bad = find_bad_rows(batch, CONFIG, "insert")
    assert sorted(bad) == [3, 7, 500, 999]
    assert "does not fit the table type int32" in bad[3]
    assert "null record key" in bad[7]


def _config(*fields: pa.Field, partition_by: tuple[str, ...] = ()) -> TableConfig:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), *fields])
    return TableConfig.new(name="t", record_key="id", schema=schema, partition_by=[*partition_by])


def _found(column: pa.Array, table_type: pa.DataType) -> list[int]:
    """The rows ``find_bad_rows`` flags for one column (every record key present)."""
    batch = pa.table({"id": pa.array(range(len(column)), pa.int64()), "v": column})
    return sorted(find_bad_rows(batch, _config(pa.field("v", table_type)), "insert"))


NAN, INF = float("nan"), float("inf")
# (input column, table type, the rows whose value does not fit): each type pair with a
# vectorised rule, its values on and just past the bounds, nulls (never a misfit) among them.
MISFITS = [
    (pa.array([2**31 - 1, 2**31, None, -(2**31), -(2**31) - 1, 7], pa.int64()), pa.int32(), [1, 4]),
    (pa.array([0, -1, 255, 256, None, 2**63 - 1], pa.int64()), pa.uint8(), [1, 3, 5]),
    (pa.array([2**63 - 1, 2**63, 5, None], pa.uint64()), pa.int64(), [1]),
    (pa.array([-(2**15) - 1, 2**15 - 1, 2**15, 0], pa.int32()), pa.int16(), [0, 2]),
    (pa.array([2**53, 2**53 + 1, -(2**53), -(2**53) - 2, None], pa.int64()), pa.float64(), [1, 3]),
    (pa.array([2**24, 2**24 + 2, -(2**24) - 1, 3], pa.int64()), pa.float32(), [1, 2]),
    (
        pa.array([1.0, 1.5, NAN, INF, -INF, 2.0**31, -(2.0**31), -0.0, None]),
        pa.int32(),
        [1, 2, 3, 4, 5],
    ),
    (pa.array([2.0**63, -(2.0**63), 2.0**62, 0.5, NAN, None]), pa.int64(), [0, 3, 4]),
    (pa.array([127.0, 128.0, -128.0, -129.0, 1.25], pa.float32()), pa.int8(), [1, 3, 4]),
    (pa.array([-1.0, 0.0, 65535.0, 65536.0]), pa.uint16(), [0, 3]),
    (
        pa.array([1000, 1001, -1500, None, -2000, 5], pa.timestamp("us", tz="UTC")),
        pa.timestamp("ms"),
        [1, 2, 5],
    ),
    (pa.array([10**16, 1, -(10**16), None], pa.timestamp("us")), pa.timestamp("ns"), [0, 2]),
]


@pytest.mark.parametrize(("column", "table_type", "expected"), MISFITS)
def test_values_that_do_not_fit_are_found_without_bisection(
    column: pa.Array, table_type: pa.DataType, expected: list[int]
) -> None:
    assert _misfits(column, table_type) is not None  # the vectorised rule applies
    assert _found(column, table_type) == expected
    # the rule's verdicts are the bisection's (which asks Arrow's cast itself)
    assert _uncastable(column, table_type) == _bisect(column, table_type, 0) == expected


def test_a_rule_that_misses_a_misfit_falls_back_to_bisection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    column = pa.array([1, 2**40, 3, -(2**40)], pa.int64())
    monkeypatch.setattr(_bad_rows, "_misfits", lambda values, target: pc.equal(values, 3))
    assert _uncastable(column, pa.int32()) == [1, 3]


def test_strings_that_do_not_parse_are_found_by_bisection() -> None:
    column = pa.array(["2020-01-01", "x", "2020-01-01T10:00:00", None, "2020-13-01", "1"])
    assert _misfits(column, pa.timestamp("us")) is None
    assert _found(column, pa.timestamp("us")) == [1, 4, 5]


def test_the_first_problem_of_a_row_is_its_reason() -> None:
    config = _config(pa.field("q", pa.int32()), pa.field("r", pa.string(), nullable=False))
    batch = pa.table(
        {
            "id": pa.array([1, None, None, 4], pa.int64()),
            "q": pa.array([2**31, 0, 2**31, -1], pa.int64()),
            "r": pa.array(["eu", "us", None, None]),
        }
    )
    assert find_bad_rows(batch, config, "insert") == {
        0: "value 2147483648 of column 'q' does not fit the table type int32",
        1: "the record has a null record key field 'id'",
        2: "the record has a null record key field 'id'",
        3: "the record has a null in required field 'r'",
    }


def test_each_bad_row_is_published_once_with_its_context_and_the_rest_is_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = _config(pa.field("q", pa.int32()), pa.field("r", pa.string()), partition_by=("r",))
    spec = WriteSpec(uri="/t", instant="20240101000000000", job_id="j", operation="insert")
    rows = BadRows(spec, config, "attempt_j_0001_0", where="task 3")
    events: list[dict[str, Any]] = []

    def publish_encoded(value: bytes, *, key: bytes) -> None:  # no broker needed
        assert key == config.table_id.encode()
        events.append(default_codec().decode(value).record)

    monkeypatch.setattr(rows.publisher, "publish_encoded", publish_encoded)
    batch = pa.table(
        {
            "id": pa.array([1, None, 3, 4, 5], pa.int64()),
            "q": pa.array([1, 2, 2**40, 4, -(2**40)], pa.int64()),
            "r": pa.array(["eu", "us", "eu", None, "us"]),
        }
    )

    written = rows.conform(batch, first_row=40)

    assert written.to_pylist() == [{"id": 1, "q": 1, "r": "eu"}, {"id": 4, "q": 4, "r": None}]
    assert rows.count == 3
    assert [e["message"] for e in events] == [
        "task 3, row 41 of the task's input: the record has a null record key field 'id'",
        "task 3, row 42 of the task's input: value 1099511627776 of column 'q' does not fit "
        "the table type int32",
        "task 3, row 44 of the task's input: value -1099511627776 of column 'q' does not fit "
        "the table type int32",
    ]
    assert [json.loads(e["record"]) for e in events] == [
        {"id": None, "q": 2, "r": "us"},
        {"id": 3, "q": 2**40, "r": "eu"},
        {"id": 5, "q": -(2**40), "r": "us"},
    ]
    assert {e["schema"] for e in events} == {'{"id": "int64", "q": "int64", "r": "string"}'}
    assert [e["context"] for e in events][1] == {
        "commitTime": "20240101000000000",
        "tableName": "t",
        "tableId": config.table_id,
        "tableUri": "/t",
        "partitionPath": "r=eu",
        "recordKey": "3",
        "taskAttempt": "attempt_j_0001_0",
        "jobId": "j",
        "operation": "insert",
        "rowIndex": "42",
    }
    assert [e["context"]["recordKey"] for e in events] == ["", "3", "5"]
    assert [e["context"]["rowIndex"] for e in events] == ["41", "42", "44"]


def test_a_chosen_error_table_is_named_in_every_records_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The write's ``error_table`` option (else the table's config) travels in the context:
    the sink commits the record there, whatever its own settings."""
    from lakewarden.table.config import ErrorTableChoice

    config = _config(pa.field("q", pa.int32()), pa.field("r", pa.string()), partition_by=("r",))
    choice = ErrorTableChoice(kind="global", name="shared", base_path="/lake")
    spec = WriteSpec(
        uri="/t", instant="20240101000000000", job_id="j", operation="insert", error_table=choice
    )
    rows = BadRows(spec, config, "attempt_j_0001_0", where="task 3")
    events: list[dict[str, Any]] = []
    monkeypatch.setattr(
        rows.publisher,
        "publish_encoded",
        lambda value, *, key: events.append(default_codec().decode(value).record),
    )
    batch = pa.table({"id": pa.array([None], pa.int64()), "q": [1], "r": ["eu"]})
    rows.conform(batch, first_row=0)
    [event] = events
    assert event["context"]["errorTableUri"] == "/lake/shared"
    assert event["context"]["errorTableName"] == "shared"


def test_a_bad_row_with_a_timestamp_python_cannot_hold_is_published_with_its_arrow_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Year 11476 is a valid Arrow and Spark timestamp but out of Python's datetime range:
    # describing the bad row used to raise OverflowError, losing the record and the reason.
    config = _config(pa.field("q", pa.int32()), pa.field("at", pa.timestamp("us")))
    spec = WriteSpec(uri="/t", instant="20240101000000000", job_id="j", operation="insert")
    rows = BadRows(spec, config, "attempt_j_0001_0", where="task 3")
    events: list[dict[str, Any]] = []
    monkeypatch.setattr(
        rows.publisher,
        "publish_encoded",
        lambda value, *, key: events.append(default_codec().decode(value).record),
    )
    far = pa.array([300_000_000_000_000_000, 0], pa.timestamp("us"))
    batch = pa.table({"id": pa.array([1, 2], pa.int64()), "q": [2**40, 1], "at": far})

    written = rows.conform(batch, first_row=0)

    assert written.column("id").to_pylist() == [2]
    assert json.loads(events[0]["record"]) == {
        "id": 1,
        "q": 2**40,
        "at": "11476-08-15 05:20:00.000000",
    }
