"""A compaction's records that the table's schema cannot hold (RFC-20's ``completeCompaction``
write path): set aside in the error table with the compaction instant when the plan says
``bad_records="error-table"``, else the plan fails with a named error; input that cannot be
read as records fails the plan whatever it says (``lakewarden.tableservice.unfit``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner

from lakewarden.api.table import Table
from lakewarden.cli import cli
from lakewarden.errortable import committed_sources, error_table_location, open_error_table
from lakewarden.errortable.divert import SPOOL_DIR, settle, spool_key
from lakewarden.logfile import MissingCommittedBlockError
from lakewarden.settings import ErrorTableSettings, Settings
from lakewarden.table.config import CONFIG_KEY, describe_fields, encode_schema
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.instant import Transition
from lakewarden.table.plans import ServicePlan
from lakewarden.tableservice import InvalidPlanOptionsError, ServiceOutcome
from lakewarden.tableservice.errors import UndivertibleRecordsError, UnwritableRecordsError
from lakewarden.tableservice.unfit import unfit_records

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("region", pa.string()),
        pa.field("ts", pa.int64()),
        pa.field("qty", pa.int64()),
    ]
)
# The schema the table evolves to: ``qty`` narrowed to int32 and made required.
NARROWED = pa.schema([*SCHEMA][:3] + [pa.field("qty", pa.int32(), nullable=False)])
BIG = 2**40  # an int64 that int32 cannot hold


def _rows(*records: tuple[int, str, int, int | None]) -> pa.Table:
    return pa.Table.from_pylist(
        [dict(zip(SCHEMA.names, r, strict=True)) for r in records], schema=SCHEMA
    )


@pytest.fixture
def coordinator() -> EmbeddedCoordinator:
    return EmbeddedCoordinator()


@pytest.fixture
def uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS", raising=False)
    return str(tmp_path / "orders")


def _table(uri: str, coordinator: EmbeddedCoordinator, settings: Settings | None = None) -> Table:
    """A merge-on-read table whose log blocks hold values written under ``SCHEMA``, then
    evolved to ``NARROWED``: key 2's latest version overflows int32, key 3's has a null
    ``qty``, key 4's old version (superseded by a fitting one) overflows too."""
    table = Table.create(
        uri,
        name="orders",
        record_key="id",
        schema=SCHEMA,
        ordering_field="ts",
        table_type="merge_on_read",
        coordinator=coordinator,
        settings=settings,
    )
    table.write(_rows((1, "eu", 1, 10), (2, "eu", 1, 20), (3, "eu", 1, 30), (4, "eu", 1, 40)))
    table.write(_rows((2, "eu", 2, BIG), (3, "eu", 2, None), (4, "eu", 2, BIG), (5, "eu", 2, 5)))
    table.write(_rows((4, "eu", 3, 44)))
    return _evolve(table, NARROWED)


def _evolve(table: Table, schema: pa.Schema) -> Table:
    """The table's schema changed in its config (what a schema evolution step records)."""
    config = table.config.model_copy(
        update={"arrow_schema": encode_schema(schema), "fields": describe_fields(schema)}
    )
    table.storage.write(CONFIG_KEY, config.to_json())
    return Table.open(table.uri, coordinator=table.coordinator, settings=table.settings)


def _errors(table: Table) -> Table:
    location = error_table_location(table.uri, table.name, ErrorTableSettings())
    open_error_table(location, coordinator=table.coordinator, settings=table.settings)
    return Table.open(location.uri, coordinator=table.coordinator, settings=table.settings)


def _read(table: Table) -> list[dict[str, Any]]:
    return sorted(table.read().select(NARROWED.names).to_pylist(), key=lambda r: r["id"])


def test_unfit_records_names_each_row_and_column() -> None:
    table = pa.table(
        {"a": pa.array([1, BIG, None, 3, BIG]), "b": pa.array(["x", "y", "z", None, "w"])}
    )
    schema = pa.schema([pa.field("a", pa.int32()), pa.field("b", pa.string(), nullable=False)])
    bad = unfit_records(table, schema)
    assert sorted(bad) == [1, 3, 4]
    assert "column 'a': int64 value does not fit int32" in bad[1]
    assert bad[3] == "column 'b' is required but holds null"
    assert unfit_records(table.slice(0, 1), schema) == {}


@pytest.mark.parametrize("where", ["local", pytest.param("s3", marks=pytest.mark.s3)])
def test_error_table_diverts_what_the_schema_cannot_hold_once_with_the_compaction_instant(
    uri: str, coordinator: EmbeddedCoordinator, where: str, request: pytest.FixtureRequest
) -> None:
    settings = None
    if where == "s3":
        settings = request.getfixturevalue("s3_settings")
        uri = f"s3://{request.getfixturevalue('s3_bucket')}/divert/{Path(uri).parent.name}"
    table = _table(uri, coordinator, settings)
    with pytest.raises(ValueError):  # the merge-on-read read cannot cast the old values
        table.read()
    instant = table.schedule_compaction(bad_records="error-table")
    assert instant is not None
    run = table.run_table_service(instant)
    assert run.outcome is ServiceOutcome.COMPLETED
    assert run.stats is not None and run.stats.failed_records == 2
    # Readers see the compacted file group without keys 2 and 3 (their latest versions do
    # not fit), with key 4's fitting latest version (its overflowing one is superseded).
    assert _read(table) == [
        {"id": 1, "region": "eu", "ts": 1, "qty": 10},
        {"id": 4, "region": "eu", "ts": 3, "qty": 44},
        {"id": 5, "region": "eu", "ts": 2, "qty": 5},
    ]
    # ... and the error table, read back, holds exactly the two with their context.
    errors = _errors(table).read()
    assert errors.num_rows == 2
    rows = sorted(errors.to_pylist(), key=lambda r: r["record"])
    records = [json.loads(r["record"]) for r in rows]
    assert records == [
        {"id": 2, "qty": BIG, "region": "eu", "ts": 2},
        {"id": 3, "qty": None, "region": "eu", "ts": 2},
    ]
    for row in rows:
        context = dict(row["context"])
        assert row["source_instant"] == str(instant) == context["commitTime"]
        assert context["tableName"] == "orders" and context["operation"] == "compaction"
        assert context["fileGroup"] and context["sourceFile"].startswith(".")  # a log file
        assert context["sourceBlock"].startswith("0@")
        assert context["sourceInstant"] == table.timeline()[1].instant
    assert "does not fit int32" in rows[0]["message"]
    assert "is required but holds null" in rows[1]["message"]
    # Exactly once: the source is recorded, the spool gone, a second settle commits nothing.
    assert committed_sources(_errors(table).state()) == {f"{table.table_id}@{instant}"}
    assert list(table.storage.list(SPOOL_DIR)) == []
    assert settle(table).committed == []


def test_fail_is_the_default_and_names_the_records(
    uri: str, coordinator: EmbeddedCoordinator
) -> None:
    table = _table(uri, coordinator)
    instant = table.schedule_compaction()
    assert instant is not None
    with pytest.raises(UnwritableRecordsError, match=r"2 record\(s\).*Help: schedule") as err:
        table.run_table_service(instant)
    assert err.value.count == 2 and err.value.instant == str(instant)
    mine = table.state().get(str(instant))
    assert mine is not None and mine.is_pending  # nothing completed: the plan stays
    assert list(table.storage.list(SPOOL_DIR)) == []
    assert not Path(uri + "_errors").exists()


def test_a_superseded_version_that_does_not_fit_is_not_a_failed_record(
    uri: str, coordinator: EmbeddedCoordinator
) -> None:
    table = Table.create(
        uri,
        name="orders",
        record_key="id",
        schema=SCHEMA,
        ordering_field="ts",
        table_type="merge_on_read",
        coordinator=coordinator,
    )
    table.write(_rows((1, "eu", 1, 10)))
    table.write(_rows((1, "eu", 2, BIG)))
    table.write(_rows((1, "eu", 3, 11)))
    table = _evolve(table, NARROWED)
    instant = table.schedule_compaction()  # "fail": nothing the slice holds fails
    assert instant is not None
    run = table.run_table_service(instant)
    assert run.stats is not None and run.stats.failed_records == 0
    assert _read(table) == [{"id": 1, "region": "eu", "ts": 3, "qty": 11}]


def test_a_fenced_attempts_spool_is_dropped_and_the_completing_attempts_committed(
    uri: str, coordinator: EmbeddedCoordinator
) -> None:
    table = _table(uri, coordinator)
    instant = table.schedule_compaction(bad_records="error-table")
    assert instant is not None
    # An earlier attempt's spool (it died after spooling): never the one committed.
    stale = {"uid": "stale", "ts": "0", "schema": None, "record": "{}", "message": "stale"}
    stale["context"] = {"commitTime": str(instant), "tableId": table.table_id}  # type: ignore[assignment]
    table.storage.write_if_absent(spool_key(str(instant), 7), (json.dumps(stale) + "\n").encode())
    run = table.run_table_service(instant)
    assert run.outcome is ServiceOutcome.COMPLETED and run.attempt != 7
    uids = _errors(table).read().column("uid").to_pylist()
    assert len(uids) == 2 and "stale" not in uids
    assert list(table.storage.list(SPOOL_DIR)) == []


def test_a_corrupt_committed_block_fails_the_plan_even_when_diverting(
    uri: str, coordinator: EmbeddedCoordinator
) -> None:
    table = _table(uri, coordinator)
    log_file = table.snapshot().slices.popitem()[1].log_files[0].path
    data = bytearray(table.storage.read(log_file))
    data[len(data) // 2] ^= 0xFF  # bit rot inside the committed block
    table.storage.write(log_file, bytes(data))
    instant = table.schedule_compaction(bad_records="error-table")
    assert instant is not None
    with pytest.raises(MissingCommittedBlockError, match="Help: ") as err:
        table.run_table_service(instant)
    assert "nothing was skipped silently" in str(err.value)
    mine = table.state().get(str(instant))
    assert mine is not None and mine.state is not Transition.COMPLETED
    assert list(table.storage.list(SPOOL_DIR)) == []
    assert not Path(uri + "_errors").exists()


def test_a_column_whose_types_cannot_merge_fails_the_plan_even_when_diverting(
    uri: str, coordinator: EmbeddedCoordinator
) -> None:
    table = _table(uri, coordinator)
    as_text = pa.schema([*SCHEMA][:3] + [pa.field("qty", pa.list_(pa.int32()))])
    table = _evolve(table, as_text)
    instant = table.schedule_compaction(bad_records="error-table")
    assert instant is not None
    with pytest.raises(UndivertibleRecordsError, match="cannot merge.*Help: ") as err:
        table.run_table_service(instant)
    assert err.value.instant == str(instant)
    assert list(table.storage.list(SPOOL_DIR)) == []


def test_skip_is_not_a_compaction_choice(uri: str, coordinator: EmbeddedCoordinator) -> None:
    table = _table(uri, coordinator)
    with pytest.raises(InvalidPlanOptionsError, match="no 'skip'"):
        table.schedule_compaction(bad_records="skip")  # type: ignore[arg-type]


def test_cli_schedule_records_the_choice_in_the_plan(
    uri: str, coordinator: EmbeddedCoordinator
) -> None:
    _table(uri, coordinator)
    result = CliRunner().invoke(cli, ["compact", "schedule", uri, "--bad-records", "error-table"])
    assert result.exit_code == 0, result.output
    mine = Table.open(uri, coordinator=coordinator).state().get(result.output.strip())
    assert mine is not None and isinstance(mine.plan, ServicePlan)
    assert mine.plan.bad_records == "error-table"
    result = CliRunner().invoke(cli, ["compact", "run", uri])
    assert result.exit_code == 0, result.output
    done = f"{mine.instant} completed (2 record(s) set aside in the error table)"
    assert done in result.output.splitlines()
    assert CliRunner().invoke(cli, ["errors", "count", uri]).output.strip() == "2"


def test_an_executor_that_dies_after_completing_leaves_its_spool_for_settle(
    uri: str, coordinator: EmbeddedCoordinator
) -> None:
    from lakewarden.tableservice import run_table_service

    table = _table(uri, coordinator)
    instant = table.schedule_compaction(bad_records="error-table")
    assert instant is not None
    # The executor without Table's settle: as if it died right after ``completed``.
    run = run_table_service(table.service_context(), str(instant))
    assert run.outcome is ServiceOutcome.COMPLETED
    assert [i.key for i in table.storage.list(SPOOL_DIR)] == [spool_key(str(instant), run.attempt)]
    assert not Path(uri + "_errors").exists()
    # A clean, orphans included, never takes the spool for a stray.
    table.clean(delete_orphans=True, wall_clock=lambda: 4_000_000_000.0)
    assert table.storage.exists(spool_key(str(instant), run.attempt))
    result = CliRunner().invoke(cli, ["errors", "settle", uri])
    assert result.exit_code == 0, result.output
    assert "committed 1" in result.output
    assert _errors(table).read().num_rows == 2
    assert settle(table).committed == []  # exactly once


def test_statistics_that_count_records_no_spool_holds_complete_nothing(tmp_path: Path) -> None:
    from lakewarden.storage import open_storage
    from lakewarden.table.job_commit import StatisticsMismatchError
    from lakewarden.table.stats import CommitStats
    from lakewarden.tableservice.unfit import spool_failed

    storage = open_storage(str(tmp_path), Settings())
    stats = CommitStats(operation="compaction", failed_records=1)
    with pytest.raises(StatisticsMismatchError, match="Help: "):
        spool_failed(storage, "20260101000000000", 3, [], stats)
    assert not storage.exists(spool_key("20260101000000000", 3))
