"""apache/hudi#7826 (HUDI-5675, HUDI-7361): ``rollbackFailedWrites`` listed an inflight
instant, found its heartbeat "expired" (the writer had completed and deleted its heartbeat
file), and rolled back an instant that had just completed: committed data deleted.

Here the rollback's first step is an entry, the rollback *intent*, that the state machine
accepts only while its target is pending. The test gives the cleaner exactly Hudi's view: the
write is pending when the cleaner loads the timeline, and a ``HeartbeatExpired`` names it
(``dead``); the writer then completes between that load and the intent's append. The intent
is refused against the log it lands on, so nothing is rolled back or deleted and every record
of the completed write reads back.
"""

from __future__ import annotations

from pathlib import Path

from _fence_safety import (
    Before,
    Paused,
    by_id,
    entry_is,
    new_table,
    pending_ingestion,
    process,
    rows,
)

from lakewarden.table.instant import Action, Transition


def test_hudi_7826_a_completed_instant_is_never_rolled_back_for_an_expired_heartbeat(
    tmp_path: Path,
) -> None:
    table = new_table(tmp_path)
    table.write(rows("v1"))
    writer = Paused(table, entry_is("completed", "commit"), "writer").start(
        lambda t: t.write(rows("v2"))
    )
    instant = pending_ingestion(table)

    def the_writer_completes() -> None:
        writer.resume()  # after the cleaner loaded the log, before its intent lands

    racing = Before(table.storage, entry_is("requested", "rollback"), the_writer_completes)
    result = process(table, "cleaner", racing).clean(dead={instant})  # "looked expired"

    assert racing.fired, "the cleaner never tried to roll the write back"
    assert writer.error is None
    assert result.rolled_back == ()
    mine = table.state().get(instant)
    assert mine is not None and mine.state is Transition.COMPLETED and mine.commit is not None
    assert all(table.storage.exists(s.path) for s in mine.commit.write_stats)
    assert not [i for i in table.state().instants.values() if i.action is Action.ROLLBACK]
    assert set(by_id(table).values()) == {"v2"}
