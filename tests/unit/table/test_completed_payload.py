"""The typed ``completed`` payload (``CommitStats`` version 2): each concept a field, a round
trip through the timeline's JSON, and a timeline written before (version 1, the concepts as
strings in ``extra_metadata``: ``fixtures/completed_v1``, made by the code of that time) read
to the same values and the same decisions, from its entries and from its checkpoint."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from lakewarden.errortable.acceptance import job_id_of
from lakewarden.errortable.table import committed_sources
from lakewarden.spark._transaction import BatchKey, completed_batch
from lakewarden.storage.local import LocalStorage
from lakewarden.table.job_commit import AlreadyCommittedError, check_once
from lakewarden.table.stats import CleanOutcome, CommitStats, MicroBatch, WriteStat
from lakewarden.table.timeline import Timeline, TimelineState
from lakewarden.table.transaction import entry_payload

FIXTURE = Path(__file__).parent / "fixtures" / "completed_v1"
# The fixture's instants (see its make_completed_v1.py).
DELETE, BATCH, ERRORS = "20261128120705372", "20261128120705440", "20261128120705458"
DEAD, ROLLBACK, CLEAN = "20261128120705487", "20261128120705493", "20261128120705525"
SOURCES = ("main-table-id@20240101000000000", "main-table-id@20240101000000001")

EVERYTHING = CommitStats(
    operation="insert",
    failed_records=1,
    job_id="job-1",
    batch=MicroBatch(query_id="q", run_id="r", batch_id=4, checkpoint="/ckpt"),
    error_sources=SOURCES,
    input_records=5,
    deleted_records=2,
    attempt=3,
    rollback_target="20240101000000000",
    clean=CleanOutcome(files_deleted=2, bytes_deleted=9, policy="keep-latest-commits=1"),
)


def test_every_typed_field_round_trips_through_the_entry_json() -> None:
    payload = entry_payload(EVERYTHING)
    assert payload["version"] == 2 and "extra_metadata" not in payload
    assert CommitStats.model_validate(payload) == EVERYTHING
    assert CommitStats.model_validate_json(EVERYTHING.model_dump_json()) == EVERYTHING


def test_an_entry_carries_only_the_fields_its_action_set() -> None:
    assert set(entry_payload(CommitStats(operation="insert"))) == {
        "version",
        "operation",
        "write_stats",
        "replaced_file_groups",
        "failed_records",
    }
    batch = CommitStats(operation="insert", job_id="j", batch=EVERYTHING.batch, input_records=0)
    assert set(entry_payload(batch)) - set(entry_payload(CommitStats(operation="x"))) == {
        "job_id",
        "batch",
        "input_records",
    }


def _load(tmp_path: Path, *, checkpoint: bool) -> TimelineState:
    root = tmp_path / ("with" if checkpoint else "without")
    shutil.copytree(FIXTURE / ".lakewarden", root / ".lakewarden")
    if not checkpoint:
        shutil.rmtree(root / ".lakewarden" / "timeline" / "_checkpoints")
    return Timeline(LocalStorage(str(root))).load()


@pytest.mark.parametrize("checkpoint", [False, True], ids=["entries", "checkpoint"])
def test_a_version_1_timeline_reads_as_the_typed_fields(tmp_path: Path, checkpoint: bool) -> None:
    state = _load(tmp_path, checkpoint=checkpoint)
    assert state.rejected == ()  # every old entry is still legal
    commits = {i.instant: i.commit for i in state.completed() if i.commit is not None}
    assert len(commits) == 7
    assert commits[DELETE].deleted_records == 1
    batch = commits[BATCH]
    assert (batch.job_id, batch.input_records, batch.failed_records) == ("job-batch0", 5, 1)
    assert batch.batch == MicroBatch(
        query_id="query-1", run_id="run-1", batch_id=0, checkpoint="/checkpoints/orders"
    )
    assert (commits[ERRORS].error_sources, commits[ERRORS].input_records) == (SOURCES, 2)
    assert commits[ROLLBACK].rollback_target == commits[ROLLBACK].rolled_back_target() == DEAD
    assert commits[CLEAN].clean == CleanOutcome(
        files_deleted=2,
        bytes_deleted=4244,
        uploads_aborted=0,
        earliest_retained_instant=DELETE,
        policy="keep-latest-commits=1",
    )
    typed = {"job_id", "batch", "error_sources", "input_records", "deleted_records"}
    typed |= {"rollback_target", "clean"}
    plain = [c for i, c in commits.items() if i not in (DELETE, BATCH, ERRORS, ROLLBACK, CLEAN)]
    assert all(not (c.model_fields_set & typed) for c in plain)  # nothing invented


def test_a_version_1_timeline_means_the_same_to_its_readers(tmp_path: Path) -> None:
    """The decisions that read the old strings decide the same on the typed fields: the
    micro-batch is committed (any run of the query), the once rule refuses it again, the
    error table's sources are committed, the main instant names its committer job."""
    state = _load(tmp_path, checkpoint=False)
    done = completed_batch(state, BatchKey("query-1", "run-2", 0))
    assert done is not None and done.instant == BATCH
    assert completed_batch(state, BatchKey("query-1", "run-1", 1)) is None
    with pytest.raises(AlreadyCommittedError, match="micro-batch 0 of streaming query query-1"):
        check_once(state, "20991231000000000", MicroBatch(query_id="query-1", batch_id=0))
    check_once(state, "20991231000000000", MicroBatch(query_id="query-2", batch_id=0))
    assert committed_sources(state) == set(SOURCES)
    batch = state.get(BATCH)
    assert batch is not None and job_id_of(batch) == "job-batch0"


V1: dict[str, Any] = {"operation": "insert", "write_stats": [], "failed_records": 0}


def test_version_1_values_no_reader_could_use_are_left_out() -> None:
    broken = {
        "num_deletes": "-1",
        "num_input_records": "many",
        "files_deleted": "x",
        "bytes_deleted": "1",
        "uploads_aborted": "0",
        "lakewarden.errors.sources": "not json",
        "spark.streaming.query_id": "q",  # no batch id: no micro-batch
        "spark.job_id": "",
        "some.other.key": "v",
    }
    stats = CommitStats.model_validate({**V1, "extra_metadata": broken})
    assert stats == CommitStats(operation="insert")


def test_a_version_1_map_that_is_not_strings_is_refused_as_it_was() -> None:
    with pytest.raises(ValidationError, match="must map strings to strings"):
        CommitStats.model_validate({**V1, "extra_metadata": {"k": 1}})
    with pytest.raises(ValidationError, match="must map strings to strings"):
        CommitStats.model_validate({**V1, "extra_metadata": ["k"]})


def test_a_typed_field_wins_over_the_version_1_map() -> None:
    """Version-1 entries written after the clean counts and the rollback target were typed
    carry them as fields (and an empty map)."""
    data = {**V1, "rollback_target": "t", "extra_metadata": {"target": "old"}}
    assert CommitStats.model_validate(data).rollback_target == "t"


def test_a_payload_with_a_version_is_never_upgraded() -> None:
    """What replay's msgspec mirror relies on: it reads a payload that has ``version`` with
    the plain fields only (an ``extra_metadata`` beside it is an unknown key, ignored)."""
    data = {**V1, "version": 2, "extra_metadata": {"spark.job_id": "j", "num_deletes": "3"}}
    assert CommitStats.model_validate(data) == CommitStats(operation="insert")


def test_write_stats_survive_the_upgrade() -> None:
    stat = {
        "file_group": {"partition_path": "", "file_id": "f"},
        "path": "f_0-0-0_20240101000000000.parquet",
        "base_instant": "20240101000000000",
        "num_records": 3,
        "size_bytes": 10,
    }
    data = {**V1, "write_stats": [stat], "extra_metadata": {"spark.job_id": "j"}}
    stats = CommitStats.model_validate(data)
    assert stats.write_stats == (WriteStat.model_validate(stat),) and stats.job_id == "j"
