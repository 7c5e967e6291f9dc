"""``lakewarden errors show`` fits a terminal: one line per failed record at any width from
80 columns up, long values cut with an ellipsis, the reason without the repeated prefix."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner
from rich.console import Console

from lakewarden.api.table import Table
from lakewarden.cli import cli
from lakewarden.cli.errors import records_table
from lakewarden.errortable import (
    SourceErrors,
    SourceKey,
    commit_errors,
    error_table_location,
    open_error_table,
    parse_error_record,
)
from lakewarden.errortable.records import failure_reason, kafka_record_message, task_row_message
from lakewarden.errortable.testing import FakeWrite
from lakewarden.settings import ErrorTableSettings

LONG = "x" * 300


def _kafka_row(instant: str, offset: int, *, key: str = "") -> dict[str, Any]:
    topic = "demo.orders-with-a-rather-long-topic-name"
    return {
        "source_instant": instant,
        "message": kafka_record_message(topic, 3, offset, f"missing record key 'order_id' {LONG}"),
        "record": "RAW" * 100,
        "context": {
            "kafkaTopic": "demo.orders-with-a-rather-long-topic-name",
            "kafkaPartition": "3",
            "kafkaOffset": str(offset),
            "recordKey": key,
            "taskAttempt": f"attempt_{LONG}",
        },
    }


def _rendered(rows: list[dict[str, Any]], width: int) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(records_table(rows, title=f"failed records of /data/{LONG}", width=width))
    return console.export_text().splitlines()


def _body(lines: list[str]) -> list[str]:
    """The record lines: between the rule under the header and the bottom border."""
    start = next(i for i, line in enumerate(lines) if line.startswith("┡"))
    end = next(i for i, line in enumerate(lines) if line.startswith("└"))
    return lines[start + 1 : end]


@pytest.mark.parametrize("width", [80, 100, 120, 200])
@pytest.mark.parametrize("instants", [1, 3])
def test_each_record_is_one_line_that_fits(width: int, instants: int) -> None:
    rows = [
        _kafka_row(f"2026112809000000{n % instants}", offset=1000 + n, key=f"key-{n}-{LONG}")
        for n in range(5)
    ]
    lines = _rendered(rows, width)
    body = _body(lines)

    assert len(body) == len(rows)
    assert all(len(line) <= width for line in lines)
    for row, line in zip(rows, body, strict=True):
        source, reason = line.split("│")[-4].strip(), line.split("│")[-2].strip()
        assert source.startswith("demo.") and source.endswith(f"…/3@{1000 + rows.index(row)}")
        assert reason.startswith("missing record"), reason  # the reason, not its prefix
        assert line.rstrip(" │").endswith("…")
        assert "RAW" not in line  # the raw record stays in the error table
    header = next(line for line in lines if line.startswith("┃"))
    assert ("instant" in header) == (instants > 1)
    assert any(f"instant {rows[0]['source_instant']}" in line for line in lines) == (instants == 1)


def test_the_source_position_fits_at_80_columns() -> None:
    rows = [
        {
            "source_instant": "20261128090000000",
            "message": kafka_record_message("demo.orders", 0, n, "not JSON"),
            "context": {"kafkaTopic": "demo.orders", "kafkaPartition": "0", "kafkaOffset": str(n)},
        }
        for n in (7, 12345)
    ]
    lines = _rendered(rows, 80)
    body = _body(lines)
    assert "record key" not in next(line for line in lines if line.startswith("┃"))  # no keys
    assert [line.split("│")[1].strip() for line in body] == [
        "demo.orders/0@7",
        "demo.orders/0@12345",
    ]
    assert [line.split("│")[-2].strip() for line in body] == ["not JSON", "not JSON"]


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (kafka_record_message("t.x", 0, 5, "missing record key 'id'"), "missing record key 'id'"),
        (task_row_message("task 3 of job j", 7, "amount: not an int"), "amount: not an int"),
        ("bad record k1", "bad record k1"),
    ],
)
def test_failure_reason_drops_the_prefix_that_repeats_the_source(message: str, reason: str) -> None:
    assert failure_reason(message) == reason


def test_errors_show_prints_one_line_per_record_at_80_columns(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("x", pa.int32())])
    main = Table.create(str(tmp_path / "orders"), name="orders", record_key="id", schema=schema)
    write = FakeWrite(main)
    attempt = write.attempt(0)
    write.complete([attempt])
    keys = [f"k{n}-{LONG}" for n in range(4)]
    rows = tuple(parse_error_record(event) for event in write.errors(attempt, keys))
    location = error_table_location(main.uri, main.name, ErrorTableSettings())
    errors = open_error_table(location, coordinator=main.coordinator)
    commit_errors(errors, [SourceErrors(SourceKey(main.table_id, write.instant), rows)])

    result = CliRunner().invoke(
        cli, ["errors", "show", main.uri, "--limit", "3"], env={"COLUMNS": "80"}
    )

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    body = _body(lines)
    assert len(body) == 3 and all(len(line) <= 80 for line in lines)
    assert all(line.split("│")[2].strip().startswith("k") for line in body)  # the record key
    assert lines[-1] == "3 of 4 shown; --limit 4 shows all"
