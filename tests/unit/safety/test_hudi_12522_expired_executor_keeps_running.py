"""apache/hudi#12522 and #18903: a writer whose heartbeat expired kept running for hours (its
heartbeat never recovered in #12522; one delayed beat killed its heartbeat timer for good in
#18903), so liveness and reality disagreed in both directions.

Here liveness only ever decides whether a pending write's files may be deleted, never whether
a commit is correct, and only positive knowledge of death licenses the deletion
(``lakewarden.table.death``):

1. a writer that beats again (a late beat: the coordinator says ALIVE) is not rolled back,
   even though a ``HeartbeatExpired`` named it; once its heartbeat ends for good it is;
2. a writer whose expiry the cleaner acted on (rollback intent, ``rolled_back``, its files
   deleted) and that keeps running can never complete: its ``completed`` is refused against
   the rollback on the log, whatever its heartbeat does afterwards; nothing of it is visible.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _fence_safety import (
    Before,
    Paused,
    by_id,
    crash,
    entry_is,
    new_table,
    pending_ingestion,
    process,
    rows,
)

from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.instant import Transition
from lakewarden.table.timeline import IllegalTransitionError
from lakewarden.testing import SimulatedCrash


def test_hudi_12522_an_expired_writer_that_beats_again_is_left_alone(tmp_path: Path) -> None:
    table = new_table(tmp_path)
    table.write(rows("v1"))
    shared = EmbeddedCoordinator()  # the cleaner sees this writer's heartbeat
    writer = process(table, "writer", Before(table.storage, entry_is("completed"), crash))
    with pytest.raises(SimulatedCrash):
        writer.write(rows("v2"))  # it stops before completing; its files are in place
    instant = pending_ingestion(table)
    cleaner = process(table, "cleaner", coordinator=shared)
    with shared.heartbeat(table.table_id, instant, "writer"):  # 1.: a late beat
        assert cleaner.clean(dead={instant}).rolled_back == ()
        mine = table.state().get(instant)
        assert mine is not None and mine.is_pending and mine.rollback_by is None
    # Its heartbeat ended for good: now it is known dead, and rolled back.
    assert cleaner.clean().rolled_back == (instant,)
    assert set(by_id(table).values()) == {"v1"}


def test_hudi_12522_a_writer_rolled_back_on_its_expiry_can_never_commit(tmp_path: Path) -> None:
    table = new_table(tmp_path)
    table.write(rows("v1"))
    writer = Paused(table, entry_is("completed", "commit"), "writer").start(
        lambda t: t.write(rows("v2"))
    )
    instant = pending_ingestion(table)
    result = process(table, "cleaner").clean(dead={instant})  # 2.: the expiry is acted on
    assert result.rolled_back == (instant,)
    with writer.table.coordinator.heartbeat(table.table_id, instant, "writer"):
        writer.resume()  # it kept running, and beats again: too late
    assert isinstance(writer.error, IllegalTransitionError)
    assert "rolled_back" in str(writer.error)
    mine = table.state().get(instant)
    assert mine is not None and mine.state is Transition.ROLLED_BACK
    table.clean()
    assert not [o.key for o in table.storage.list("") if f"_{instant}." in o.key]
    assert set(by_id(table).values()) == {"v1"}


def test_hudi_12522_a_writer_without_a_verdict_is_never_rolled_back(tmp_path: Path) -> None:
    """The writer runs in another process and nothing names it dead: its liveness is UNKNOWN,
    and UNKNOWN never licenses deleting its files."""
    table = new_table(tmp_path)
    writer = Paused(table, entry_is("completed", "commit"), "writer").start(
        lambda t: t.write(rows("v1"))
    )
    pending_ingestion(table)
    assert process(table, "cleaner").clean().rolled_back == ()
    writer.resume()
    assert writer.error is None
    assert set(by_id(table).values()) == {"v1"}
    with pytest.raises(AssertionError):
        pending_ingestion(table)
