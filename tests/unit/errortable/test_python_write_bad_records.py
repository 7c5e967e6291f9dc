"""``Table.write(bad_records=...)``: the choice Spark writes and ``lakewarden ingest`` have.
``fail`` names the first bad record and commits nothing; ``skip`` leaves the bad ones out and
counts them; ``error-table`` also commits them into the error table exactly once with the
write's instant, surviving a crash between the main commit and the error-table commit."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from lakewarden.api.table import Table
from lakewarden.cli import cli
from lakewarden.errortable import committed_sources, error_table_location, open_error_table
from lakewarden.errortable.divert import SPOOL_DIR, settle, spool_key
from lakewarden.settings import ErrorTableSettings
from lakewarden.table.instant import Transition
from lakewarden.table.write_input import InvalidRecordError
from lakewarden.testing import SimulatedCrash

SCHEMA = pa.schema(
    [
        pa.field("id", pa.string()),
        pa.field("region", pa.string()),
        pa.field("qty", pa.int64(), nullable=False),
    ]
)


@pytest.fixture
def table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Table:
    monkeypatch.delenv("LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS", raising=False)
    return Table.create(
        str(tmp_path / "orders"),
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
    )


def _mixed() -> pa.Table:
    """Rows 1 (null key) and 3 (null in the required qty) are bad."""
    return pa.table(
        {
            "id": ["a", None, "c", "d"],
            "region": ["eu", "eu", "us", "us"],
            "qty": pa.array([1, 2, 3, None], pa.int64()),
        }
    )


def _errors(table: Table) -> Table:
    location = error_table_location(table.uri, table.name, ErrorTableSettings())
    open_error_table(location, coordinator=table.coordinator)  # created on first use
    return Table.open(location.uri, coordinator=table.coordinator)


def _ids(table: Table) -> list[str]:
    return sorted(table.read().column("id").to_pylist())


def test_fail_is_the_default_and_commits_nothing(table: Table) -> None:
    with pytest.raises(InvalidRecordError, match="record 1 has a null record key"):
        table.write(_mixed(), "insert")
    assert table.timeline() == [] and _ids(table) == []


def test_skip_leaves_bad_records_out_and_counts_them(table: Table) -> None:
    result = table.write(_mixed(), "insert", bad_records="skip")
    assert _ids(table) == ["a", "c"]
    assert result.stats.failed_records == 2
    assert not Path(table.uri.removeprefix("file://") + "_errors").exists()


def test_error_table_commits_the_bad_records_once_with_the_instant(table: Table) -> None:
    result = table.write(_mixed(), "insert", bad_records="error-table")
    assert _ids(table) == ["a", "c"] and result.stats.failed_records == 2
    errors = _errors(table)
    rows = sorted(errors.read().to_pylist(), key=lambda r: r["message"])
    assert [json.loads(r["record"])["id"] for r in rows] == [None, "d"]
    assert ["null record key" in rows[0]["message"], "required field 'qty'" in rows[1]["message"]]
    context = dict(rows[1]["context"])
    assert context["commitTime"] == result.instant and context["tableId"] == table.table_id
    assert context["partitionPath"] == "region=us" and context["rowIndex"] == "3"
    assert {r["source_instant"] for r in rows} == {result.instant}
    assert committed_sources(errors.state()) == {f"{table.table_id}@{result.instant}"}
    assert list(table.storage.list(SPOOL_DIR)) == []  # the spool is gone once committed
    assert settle(table).committed == []  # nothing left; a second settle commits nothing


def test_a_crash_after_the_main_commit_is_settled_by_the_next_write(
    table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process dies between ``completed`` and the error-table commit: the spool stays,
    and the next write (or ``settle_errors``) commits it, once."""

    calls = iter([[], SimulatedCrash()])  # the settle before the write runs; the one after dies

    def settle_or_die(self: Table) -> list[str]:
        step = next(calls)
        if isinstance(step, SimulatedCrash):
            raise step
        return step

    with monkeypatch.context() as patch:
        patch.setattr(Table, "settle_errors", settle_or_die)
        with pytest.raises(SimulatedCrash):
            table.write(_mixed(), "insert", bad_records="error-table")
    [instant] = [i.key for i in table.storage.list(SPOOL_DIR)]
    completed = table.timeline()[-1]
    assert completed.state is Transition.COMPLETED and instant == spool_key(completed.instant)
    assert not Path(table.uri.removeprefix("file://") + "_errors").exists()

    settled = CliRunner().invoke(cli, ["errors", "settle", table.uri])
    assert settled.exit_code == 0 and "committed 1, dropped 0" in settled.output, settled.output
    clean = pa.table({"id": ["y"], "region": ["eu"], "qty": [1]})
    table.write(clean, "insert", bad_records="error-table")
    errors = _errors(table)
    assert len(errors.read()) == 2
    assert committed_sources(errors.state()) == {f"{table.table_id}@{completed.instant}"}
    assert table.settle_errors() == [] and len(_errors(table).read()) == 2


def test_a_rolled_back_write_drops_its_spool(table: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails after spooling is rolled back: its records were never written, so
    the next settle deletes the spool and commits nothing."""
    from lakewarden.table import writer

    def refuse(*args: object, **kwargs: object) -> object:
        raise RuntimeError("the job commit failed")

    with monkeypatch.context() as patch:
        patch.setattr(writer, "commit_instant", refuse)
        with pytest.raises(RuntimeError, match="the job commit failed"):
            table.write(_mixed(), "insert", bad_records="error-table")
    failed = table.timeline()[-1]
    assert failed.state is Transition.ROLLED_BACK
    assert [i.key for i in table.storage.list(SPOOL_DIR)] == [spool_key(failed.instant)]
    done = settle(table)
    assert (done.dropped, done.committed) == ([failed.instant], [])
    assert list(table.storage.list(SPOOL_DIR)) == []
    assert not Path(table.uri.removeprefix("file://") + "_errors").exists()


def test_an_unknown_choice_is_refused(table: Table) -> None:
    with pytest.raises(ValueError, match="bad_records must be one of"):
        table.write(_mixed(), "insert", bad_records="drop")  # type: ignore[arg-type]
