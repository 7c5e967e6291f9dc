"""apache/hudi#9674 and #6022: a cleaner running beside a writer without the shared lock
(no optimistic concurrency control configured) planned from a timeline that did not show the
writer's inflight upsert, and deleted live file slices: in #6022 every Parquet file of the
table.

Here a cleaner needs no lock for safety: its plan is appended only if the log is still the one
it planned on (``clean.run``: validated on every append attempt), a pending write's snapshot
and files are never garbage (retention rule 3, garbage's "a pending instant's file is never an
orphan"), and a file named by an instant newer than anything the cleaner read is never an
orphan either. The cleaner below runs in another "process" (its own coordinator: no shared
lock), with every policy at its most aggressive, orphans deleted, and a writer completing an
upsert between the cleaner's planning and its append."""

from __future__ import annotations

from pathlib import Path

import pytest
from _readers_safety import (
    AGGRESSIVE,
    Interleave,
    far_future,
    new_table,
    process,
    rows,
    snapshot_files_exist,
)

from lakewarden.storage.local import LocalStorage
from lakewarden.table.clean import CleanPolicy
from lakewarden.table.stats import WorkloadProfile
from lakewarden.table.transaction import WriteTransaction


@pytest.mark.parametrize("policy", AGGRESSIVE, ids=lambda p: p.policy.value)
def test_hudi_9674_6022_a_cleaner_without_the_lock_deletes_no_live_data(
    tmp_path: Path, policy: CleanPolicy
) -> None:
    writer = new_table(tmp_path / "t")
    for n in range(3):
        writer.write(rows(f"v{n}", ts=n))
    # A writer in the middle of an upsert: requested, inflight, a file at its final key.
    pending = WriteTransaction.begin(
        writer.timeline_log, writer.coordinator, writer.table_id, operation="upsert", actor="w2"
    )
    pending.inflight(WorkloadProfile(operation="upsert"))
    in_progress = f"region=eu/00000000-0000_0-0-0_{pending.instant}.parquet"
    writer.storage.write(in_progress, b"being written")

    raced = Interleave(LocalStorage(tmp_path / "t"))
    cleaner = process(writer, "cleaner", raced)
    # Just before the cleaner appends its plan, the writer completes another upsert.
    raced.before(
        "write_if_absent",
        lambda key: key.startswith(".lakewarden/timeline/"),
        lambda: writer.write(rows("v3", ts=3)),
    )
    result = cleaner.clean(policy, delete_orphans=True, wall_clock=far_future)
    assert raced.fired
    assert in_progress not in {f.path for f in result.files}
    assert writer.storage.exists(in_progress)
    snapshot_files_exist(writer)
    assert set(writer.read().column("v").to_pylist()) == {"v3"}
    state = writer.state().get(pending.instant)
    assert state is not None and state.is_pending  # liveness unknown: never rolled back


def test_hudi_6022_a_write_the_cleaner_has_not_seen_yet_is_no_orphan(tmp_path: Path) -> None:
    """Files of an instant newer than every ``requested`` the cleaner read belong to a writer
    whose entry it has not seen: never orphans, even with orphans asked for."""
    writer = new_table(tmp_path / "t")
    writer.write(rows("v0"))
    cleaner = process(writer, "cleaner")
    last = writer.state().last_requested()
    assert last is not None
    unseen = f"region=eu/00000000-0000_0-0-0_{int(str(last)) + 5}.parquet"
    writer.storage.write(unseen, b"a writer whose requested entry is not read yet")
    result = cleaner.clean(AGGRESSIVE[0], delete_orphans=True, wall_clock=far_future)
    assert unseen not in {f.path for f in result.files}
    assert writer.storage.exists(unseen)
