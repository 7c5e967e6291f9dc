"""The error table commits through the manifest committer, like every other producer: a task
attempt, a manifest, the job commit, a ``_SUCCESS`` summary; a crash mid-commit is resumed by
the next commit of the same sources; a failure is rolled back through the one abandon path."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import lakewarden
from lakewarden.api.table import Table
from lakewarden.commit import ManifestCommitter
from lakewarden.errortable import (
    SourceErrors,
    SourceKey,
    commit_errors,
    error_table_location,
    open_error_table,
    parse_error_record,
)
from lakewarden.errortable.table import SourcesAlreadyCommittedError
from lakewarden.errortable.testing import FakeWrite
from lakewarden.settings import ErrorTableSettings
from lakewarden.table.instant import Transition
from lakewarden.table.job_commit import STAGE_COMPLETE
from lakewarden.testing import SimulatedCrash


@pytest.fixture
def main_table(tmp_path: Path) -> Table:
    schema = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("x", pa.int32())])
    return Table.create(str(tmp_path / "orders"), name="orders", record_key="id", schema=schema)


def _source(main: Table, keys: list[str]) -> SourceErrors:
    write = FakeWrite(main)
    attempt = write.attempt(0)
    write.complete([attempt])
    rows = tuple(parse_error_record(e) for e in write.errors(attempt, keys))
    return SourceErrors(SourceKey(main.table_id, write.instant), rows)


def _errors(main: Table) -> Table:
    location = error_table_location(main.uri, main.name, ErrorTableSettings())
    return open_error_table(location, coordinator=main.coordinator)


def _data_files(table: Table) -> set[str]:
    return {
        o.key
        for o in table.storage.list()
        if o.key.endswith(".parquet") and not o.key.startswith(("_temporary/", ".lakewarden/"))
    }


def test_commit_saves_a_success_summary_naming_the_files(main_table: Table) -> None:
    errors = _errors(main_table)
    instant = commit_errors(errors, [_source(main_table, ["k1", "k2", "k3"])])
    assert instant is not None
    mine = errors.state().get(instant)
    assert mine is not None and mine.state is Transition.COMPLETED and mine.commit is not None
    plan = mine.job_plan
    assert plan is not None and plan.job_id is not None and len(plan.sources) == 1
    summary = ManifestCommitter(errors.storage, plan.job_id).summary()
    assert summary is not None and summary.state == "COMMITTED"
    placed = {key for files in summary.committed_files.values() for key, _ in files}
    assert placed == {s.path for s in mine.commit.write_stats} == _data_files(errors)
    assert not [o.key for o in errors.storage.list("_temporary/")]  # the job cleaned up


@pytest.mark.parametrize(
    ("stage", "event"),
    [
        ("job_stage_rename_files", "end"),  # files renamed, no summary yet: manifest resumes
        (STAGE_COMPLETE, "start"),  # job committed, manifests cleaned: summary resumes
    ],
)
def test_a_crash_mid_commit_is_resumed_by_the_next_commit(
    main_table: Table, stage: str, event: str
) -> None:
    errors = _errors(main_table)
    batch = _source(main_table, [f"k{i}" for i in range(20)])

    def crash(at_event: str, at_stage: str) -> None:
        if (at_event, at_stage) == (event, stage):
            raise SimulatedCrash(f"killed at {at_event} of {at_stage}")

    with pytest.raises(SimulatedCrash):
        commit_errors(errors, [batch], hook=crash)
    (pending,) = errors.state().pending()
    assert pending.state is Transition.INFLIGHT
    assert lakewarden.read(errors.uri).num_rows == 0  # placed or not, nothing is visible

    instant = commit_errors(_errors(main_table), [batch])  # a restarted sink, same records

    assert instant == pending.instant  # the crashed instant finished, no second one
    state = errors.state()
    assert [i.instant for i in state.completed()] == [instant] and state.pending() == []
    got = lakewarden.read(errors.uri)
    assert sorted(got.column("uid").to_pylist()) == sorted(r.uid for r in batch.rows)
    mine = state.get(instant)
    assert mine is not None and mine.commit is not None
    assert sum(s.num_records for s in mine.commit.write_stats) == len(batch.rows)


def test_other_sources_do_not_resume_a_crashed_instant(main_table: Table) -> None:
    errors = _errors(main_table)
    first, second = _source(main_table, ["a"]), _source(main_table, ["b"])

    def crash(at_event: str, at_stage: str) -> None:
        if at_stage == STAGE_COMPLETE:
            raise SimulatedCrash("killed")

    with pytest.raises(SimulatedCrash):
        commit_errors(errors, [first], hook=crash)
    instant = commit_errors(errors, [first, second])  # another grouping: a new instant
    (pending,) = errors.state().pending()
    assert instant is not None and instant != pending.instant
    assert lakewarden.read(errors.uri).num_rows == 2


def test_a_refused_completion_is_rolled_back_with_its_stage_and_job(main_table: Table) -> None:
    errors = _errors(main_table)
    batch = _source(main_table, ["k1"])
    seen: list[str] = []

    def racer(instant: str) -> None:  # another sink commits the same source meanwhile
        seen.append(instant)
        commit_errors(_errors(main_table), [batch])

    with pytest.raises(SourcesAlreadyCommittedError):
        commit_errors(errors, [batch], before_complete=racer)
    mine = errors.state().get(seen[0])
    assert mine is not None and mine.state is Transition.ROLLED_BACK
    plan = mine.job_plan
    assert plan is not None and mine.failed_job_id == plan.job_id
    assert (mine.failed_stage, mine.error_type) == (STAGE_COMPLETE, "SourcesAlreadyCommittedError")
    assert mine.reason is not None and mine.reason.startswith("SourcesAlreadyCommittedError: ")
    summary = ManifestCommitter(errors.storage, plan.job_id).summary()
    assert summary is not None and summary.state == "ABORTED"  # its files are deleted
    assert lakewarden.read(errors.uri).num_rows == 1
