"""apache/hudi#18050: two jobs (cleaners, writers rolling back failed writes) schedule and
execute rollbacks of the same failed instant at once; Hudi saw transient failures and asked
whether two rollback plans of one instant may exist at all.

Here at most one rollback intent per target is legal (the state machine refuses a second
while the first targets it), and every rollback step is idempotent: the second cleaner, whose
intent is refused, finishes the first one's rollback instead. The test runs the second
cleaner completely just before the first one's intent reaches the timeline (two processes:
no shared lock). Both report the instant rolled back, neither raises, one rollback instant is
on the log and completed, the failed write's files are gone and the table reads its
committed rows.
"""

from __future__ import annotations

from pathlib import Path

from _fence_safety import (
    Before,
    by_id,
    crash,
    entry_is,
    new_table,
    pending_ingestion,
    process,
    rows,
)

from lakewarden.table.instant import Action, Transition
from lakewarden.testing import SimulatedCrash


def test_hudi_18050_two_rollbacks_of_one_failed_instant_roll_it_back_once(
    tmp_path: Path,
) -> None:
    table = new_table(tmp_path)
    table.write(rows("v1"))
    crashing = process(table, "writer", Before(table.storage, entry_is("completed"), crash))
    try:
        crashing.write(rows("v2"))
    except SimulatedCrash:  # kill -9 of the writer just before its completion
        pass
    failed = pending_ingestion(table)
    second_results = []

    def the_second_cleaner_runs() -> None:
        second_results.append(process(table, "cleaner-2").clean(dead={failed}))

    racing = Before(table.storage, entry_is("requested", "rollback"), the_second_cleaner_runs)
    first = process(table, "cleaner-1", racing).clean(dead={failed})

    assert racing.fired
    assert first.rolled_back == (failed,) and second_results[0].rolled_back == (failed,)
    state = table.state()
    mine = state.get(failed)
    assert mine is not None and mine.state is Transition.ROLLED_BACK
    rollbacks = [i for i in state.instants.values() if i.action is Action.ROLLBACK]
    assert [r.state for r in rollbacks] == [Transition.COMPLETED]
    assert not [r for r in state.rejected if r.instant == failed]
    table.clean()  # files the job did not track are garbage of a rolled-back instant
    assert not [o.key for o in table.storage.list("") if f"_{failed}." in o.key]
    assert set(by_id(table).values()) == {"v1"}
