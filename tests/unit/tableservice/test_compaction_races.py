"""Compaction racing an ingestion, step by step (RFC-79's rules, invariant 5).

A storage wrapper runs the other side at the exact moment one side writes its first data
file (an ingestion's log block, a compaction's new base file): both are then in flight on the
same file groups, which the sequential tests in ``test_compaction.py`` never arrange.

- An ingestion that began before a non-cancellable compaction completed loses: the completed
  plan beats it (``OverlappingCommitConflict``), its log files are gone, and rerunning it
  against the compacted slices works.
- An ingestion that completes while a cancellable compaction is executing wins: the
  compaction's pre-commit finds the conflict and the plan ends ``aborted``, its files gone.

Either way no read ever shows a record twice or loses a committed one. Memory and local
storage (the rules are the timeline's, whatever the store; compaction on S3 is covered by
``test_compaction.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from conftest import MakeTable
from service_tables import as_sorted, rows

from lakewarden.api.table import Table
from lakewarden.storage._forwarding import ForwardingStorage, Operation
from lakewarden.table.conflicts import OverlappingCommitConflict
from lakewarden.table.files import is_log_file, split_key
from lakewarden.table.instant import Transition
from lakewarden.tableservice import ServiceOutcome

T = TypeVar("T")


_WRITES = frozenset({"write", "write_if_absent", "rename", "create_multipart"})


class RaceStorage(ForwardingStorage):
    """Runs ``action`` once, just before the first write of a key ``when`` accepts reaches
    the wrapped storage (the caller then goes on). Writes: a put, a put-if-absent, the rename
    that places a staged file, or the start of a multipart upload (S3's staging)."""

    def __init__(self, table: Table, when: Callable[[str], bool], action: Callable[[], Any]):
        super().__init__(table.storage)
        self.when, self.action, self.fired = when, action, False

    def _invoke(self, op: Operation, key: str, call: Callable[[], T]) -> T:
        if op in _WRITES and not self.fired and self.when(key):
            self.fired = True
            self.action()
        return call()


def racing(table: Table, when: Callable[[str], bool], action: Callable[[], Any]) -> Table:
    """``table`` opened through a ``RaceStorage`` (same files, same coordinator)."""
    storage = RaceStorage(table, when, action)
    return Table(storage, table.config, coordinator=table.coordinator, actor="racer")


def is_log(key: str) -> bool:
    return is_log_file(split_key(key)[1])


def is_base_of(instant: str) -> Callable[[str], bool]:
    return lambda key: key.endswith(f"_{instant}.parquet")


def mor_table(make: MakeTable) -> tuple[Table, dict[int, dict[str, Any]]]:
    """Base files and log blocks in both buckets of both partitions; records by id."""
    table = make(table_type="merge_on_read")
    table.write(rows(*[(i, "eu" if i % 2 else "us", 1, f"a{i}") for i in range(12)]), "upsert")
    table.write(rows(*[(i, "eu" if i % 2 else "us", 2, f"b{i}") for i in range(0, 12, 3)]))
    assert all(s.log_files for s in table.snapshot().slices.values())
    return table, {r["id"]: r for r in as_sorted(table.read())}


def log_keys(table: Table) -> set[str]:
    return {k.key for k in table.storage.list() if is_log(k.key)}


UPDATE = rows(*[(i, "eu" if i % 2 else "us", 5, f"c{i}") for i in range(12)])


def updated(before: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    after = before | {r["id"]: r for r in as_sorted(UPDATE)}
    return [after[k] for k in sorted(after)]


def test_an_ingestion_in_flight_loses_to_a_non_cancellable_compaction_that_completes(
    make_table: MakeTable,
) -> None:
    table, before = mor_table(make_table)
    logs_before = log_keys(table)
    compactions: list[Any] = []

    def compact_to_the_end() -> None:
        instant = table.schedule_compaction()
        assert instant is not None
        compactions.append(table.run_table_service(instant))

    writer = racing(table, is_log, compact_to_the_end)
    with pytest.raises(OverlappingCommitConflict, match="completed") as lost:
        writer.write(UPDATE, "upsert")  # its first log block: the compaction runs to the end
    assert [c.outcome for c in compactions] == [ServiceOutcome.COMPLETED]
    assert lost.value.other_instant == compactions[0].instant
    # The ingestion's blocks were written against the old slices: it is not completed, its
    # log files are gone, and the read is the compacted one (every record once).
    ingestion = table.state().get(str(lost.value.instant))
    assert ingestion is not None and ingestion.state is not Transition.COMPLETED
    assert log_keys(table) <= logs_before
    assert all(not s.log_files for s in table.snapshot().slices.values())
    assert as_sorted(table.read()) == [before[k] for k in sorted(before)]
    table.write(UPDATE, "upsert")  # rerun against the new base files
    assert as_sorted(table.read()) == updated(before)


def test_an_ingestion_completing_during_a_cancellable_compaction_aborts_it(
    make_table: MakeTable,
) -> None:
    table, before = mor_table(make_table)
    instant = table.schedule_compaction(cancellable=True)
    assert instant is not None
    ingested: list[str] = []

    def ingest() -> None:
        ingested.append(table.write(UPDATE, "upsert").instant)

    executor = racing(table, is_base_of(str(instant)), ingest)
    run = executor.run_table_service(instant)  # its first new base file: the ingestion commits
    assert len(ingested) == 1
    assert run.outcome is ServiceOutcome.ABORTED
    state = table.state().get(str(instant))
    assert state is not None and state.state is Transition.ABORTED
    assert not any(k.key.endswith(f"_{instant}.parquet") for k in table.storage.list())
    assert as_sorted(table.read()) == updated(before)
    again = table.schedule_compaction()  # a new plan compacts what is there now
    assert again is not None
    assert table.run_table_service(again).outcome is ServiceOutcome.COMPLETED
    assert as_sorted(table.read()) == updated(before)
