"""The sink's pure logic: buffering, what a main instant accepted, offsets (no Kafka)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakewarden.api.table import Table
from lakewarden.commit import SuccessData
from lakewarden.errortable import (
    Accepted,
    Discarded,
    ErrorBuffer,
    ErrorRow,
    Pending,
    SourceKey,
    outcome_of,
    parse_error_record,
)
from lakewarden.errortable.records import InvalidErrorRecord
from lakewarden.errortable.testing import FakeWrite
from lakewarden.table.timeline import Timeline


def row(uid: str, instant: str = "20240101000000000", attempt: str = "a0") -> ErrorRow:
    context = {"tableId": "t1", "commitTime": instant, "taskAttempt": attempt}
    return ErrorRow(uid, "0", None, None, "bad", context)


KEY = SourceKey("t1", "20240101000000000")


def test_redelivered_records_are_buffered_once() -> None:
    buffer = ErrorBuffer()
    assert buffer.add(row("u1"), 0, 5)
    assert buffer.add(row("u1"), 0, 5)
    assert buffer.add(row("u2"), 0, 6)
    assert len(buffer) == 2
    assert buffer.keys() == [KEY]


def test_only_accepted_attempts_records_are_ready() -> None:
    buffer = ErrorBuffer()
    buffer.add(row("u1", attempt="a0"), 0, 0)
    buffer.add(row("u2", attempt="a1"), 0, 1)
    buffer.add(row("u3", attempt="zombie"), 0, 2)
    buffer.decide(KEY, Accepted("job", frozenset({"a0", "a1"})), {0: 3})
    [ready] = buffer.ready()
    assert sorted(r.uid for r in ready.rows) == ["u1", "u2"]
    assert ready.dropped == 1


def test_not_ready_until_read_up_to_the_watermark() -> None:
    buffer = ErrorBuffer()
    buffer.add(row("u1"), 0, 0)
    buffer.decide(KEY, Accepted("job", frozenset({"a0"})), {0: 3})
    assert buffer.ready() == []
    buffer.add(row("u2"), 0, 2)  # a record of the attempt still in flight at decision time
    [ready] = buffer.ready()
    assert {r.uid for r in ready.rows} == {"u1", "u2"}


def test_discarded_instant_drops_everything_and_late_records() -> None:
    buffer = ErrorBuffer()
    buffer.add(row("u1"), 0, 0)
    buffer.add(row("u2"), 0, 1)
    assert buffer.decide(KEY, Discarded("rolled back"), {0: 2}) == 2
    assert buffer.ready() == [] and len(buffer) == 0
    assert not buffer.add(row("u3"), 0, 2)


def test_pending_outcome_keeps_the_records() -> None:
    buffer = ErrorBuffer()
    buffer.add(row("u1"), 0, 0)
    assert buffer.decide(KEY, Pending("inflight"), {}) == 0
    assert buffer.keys() == [KEY]


def test_offsets_stay_below_unsettled_records() -> None:
    buffer = ErrorBuffer()
    other = SourceKey("t1", "20240101000000001")
    buffer.add(row("u1"), 0, 10)
    buffer.add(row("v1", instant=other.instant), 0, 15)
    buffer.add(row("u2"), 0, 20)
    buffer.consumed(1, 7)
    assert buffer.committable_offsets() == {0: 10, 1: 8}
    buffer.finish([KEY])
    assert buffer.committable_offsets() == {0: 15, 1: 8}
    buffer.finish([other])
    assert buffer.committable_offsets() == {0: 21, 1: 8}


def test_revoke_forgets_the_partition() -> None:
    buffer = ErrorBuffer()
    buffer.add(row("u1"), 3, 0)
    buffer.revoke([3])
    assert len(buffer) == 0 and buffer.committable_offsets() == {}


def test_source_key_round_trip() -> None:
    assert SourceKey.parse(str(KEY)) == KEY


def test_parse_rejects_records_without_context() -> None:
    with pytest.raises(InvalidErrorRecord, match="no context"):
        parse_error_record({"uid": "u", "ts": "0", "context": {"tableId": "t"}})


# -- outcomes from storage ------------------------------------------------------------------


@pytest.fixture
def main_table(tmp_path: Path) -> Table:
    import pyarrow as pa

    schema = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("x", pa.int32())])
    return Table.create(str(tmp_path / "orders"), name="orders", record_key="id", schema=schema)


def _outcome(table: Table, instant: str) -> object:
    state = Timeline(table.storage, table=table.name).load().get(instant)
    from lakewarden.commit import ManifestCommitter

    def summary_of(job_id: str) -> SuccessData | None:
        return ManifestCommitter(table.storage, job_id).summary()

    return outcome_of(state, summary_of)


def test_outcome_accepted_attempts_from_success_summary(main_table: Table) -> None:
    write = FakeWrite(main_table)
    loser = write.attempt(0, 0)
    winner = write.attempt(0, 1)
    other = write.attempt(1, 0)
    assert isinstance(_outcome(main_table, write.instant), Pending)
    write.complete([winner, other])
    outcome = _outcome(main_table, write.instant)
    assert outcome == Accepted(write.job_id, frozenset({winner, other}))
    assert loser not in outcome.attempts  # type: ignore[attr-defined]


def test_outcome_rolled_back_is_discarded(main_table: Table) -> None:
    write = FakeWrite(main_table)
    write.attempt(0)
    write.roll_back()
    outcome = _outcome(main_table, write.instant)
    assert isinstance(outcome, Discarded) and "rolled_back" in outcome.reason


def test_outcome_unknown_instant_is_pending(main_table: Table) -> None:
    assert isinstance(_outcome(main_table, "20990101000000000"), Pending)
