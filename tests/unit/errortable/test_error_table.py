"""The error table: where it is, create on first use, idempotent commits, read back, CLI."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

import lakewarden
from lakewarden.api.table import Table
from lakewarden.cli import cli
from lakewarden.errortable import (
    SourceErrors,
    SourceKey,
    commit_errors,
    committed_sources,
    error_table_location,
    open_error_table,
    parse_error_record,
)
from lakewarden.errortable.table import SourcesAlreadyCommittedError
from lakewarden.errortable.testing import FakeWrite
from lakewarden.settings import ErrorTableSettings


def test_local_location_is_a_sibling_with_the_suffix() -> None:
    loc = error_table_location("s3://b/lake/orders/", "orders", ErrorTableSettings())
    assert (loc.uri, loc.name) == ("s3://b/lake/orders_errors", "orders_errors")
    loc = error_table_location("/d/orders", "orders", ErrorTableSettings(suffix="_bad"))
    assert (loc.uri, loc.name) == ("/d/orders_bad", "orders_bad")


def test_name_or_base_path_switch_to_the_global_table() -> None:
    by_name = error_table_location("/d/orders", "orders", ErrorTableSettings(name="all_errors"))
    assert (by_name.uri, by_name.name) == ("/d/all_errors", "all_errors")
    by_path = error_table_location("/d/orders", "orders", ErrorTableSettings(base_path="/e/"))
    assert (by_path.uri, by_path.name) == ("/e/lakewarden_errors", "lakewarden_errors")


@pytest.fixture
def main_table(tmp_path: Path) -> Table:
    schema = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("x", pa.int32())])
    return Table.create(str(tmp_path / "orders"), name="orders", record_key="id", schema=schema)


def _batch(write: FakeWrite, attempt: str, keys: list[str]) -> SourceErrors:
    rows = tuple(parse_error_record(e) for e in write.errors(attempt, keys))
    return SourceErrors(SourceKey(write.table.table_id, write.instant), rows)


def test_commit_is_idempotent_per_source_instant(main_table: Table) -> None:
    write = FakeWrite(main_table)
    attempt = write.attempt(0)
    write.complete([attempt])
    loc = error_table_location(main_table.uri, main_table.name, ErrorTableSettings())
    errors = open_error_table(loc, coordinator=main_table.coordinator)
    batch = _batch(write, attempt, ["k1", "k2"])
    instant = commit_errors(errors, [batch])
    assert instant is not None
    again = open_error_table(loc, coordinator=main_table.coordinator)
    assert commit_errors(again, [batch]) is None  # created once, committed once
    assert committed_sources(errors.state()) == {str(batch.key)}
    got = lakewarden.read(loc.uri)
    assert sorted(got.column("uid").to_pylist()) == sorted(r.uid for r in batch.rows)
    first = got.to_pylist()[0]
    assert first["source_table"] == "orders" and first["source_instant"] == write.instant
    assert dict(first["context"])["taskAttempt"] == attempt
    assert first["day"] == f"{write.instant[:4]}-{write.instant[4:6]}-{write.instant[6:8]}"


def test_completion_refused_when_another_instant_committed_the_source(main_table: Table) -> None:
    write = FakeWrite(main_table)
    attempt = write.attempt(0)
    write.complete([attempt])
    loc = error_table_location(main_table.uri, main_table.name, ErrorTableSettings())
    errors = open_error_table(loc, coordinator=main_table.coordinator)
    batch = _batch(write, attempt, ["k1"])

    def racer(instant: str) -> None:  # another sink commits the same source meanwhile
        commit_errors(open_error_table(loc, coordinator=main_table.coordinator), [batch])

    with pytest.raises(SourcesAlreadyCommittedError, match="committed by another instant"):
        commit_errors(errors, [batch], before_complete=racer)
    assert lakewarden.read(loc.uri).num_rows == 1
    completed = errors.state().completed()
    assert [c.commit.error_sources for c in completed if c.commit] == [(str(batch.key),)]


def test_cli_show_and_count(main_table: Table) -> None:
    write = FakeWrite(main_table)
    attempt = write.attempt(0)
    write.complete([attempt])
    loc = error_table_location(main_table.uri, main_table.name, ErrorTableSettings())
    commit_errors(
        open_error_table(loc, coordinator=main_table.coordinator),
        [_batch(write, attempt, ["k1", "k2", "k3"])],
    )
    runner = CliRunner()
    counted = runner.invoke(cli, ["errors", "count", main_table.uri])
    assert counted.exit_code == 0, counted.output
    assert counted.output.strip() == "3"
    args = ["errors", "show", main_table.uri, "--limit", "2"]
    shown = runner.invoke(cli, args, env={"COLUMNS": "400"})
    assert shown.exit_code == 0, shown.output
    assert "bad record" in shown.output and write.instant in shown.output
    none = runner.invoke(cli, ["errors", "count", main_table.uri, "--instant", "20000101000000000"])
    assert none.output.strip() == "0"
