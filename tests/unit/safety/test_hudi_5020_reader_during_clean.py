"""apache/hudi#5020 (and #8584, a Spark query failing after 2.5 hours): a cleaner deleted file
slices that a running query had planned to read, and the query failed with
``FileNotFoundException``.

Here a read is either exactly a committed snapshot or a named error, and a clean does not cut
a read in progress off: no policy deletes a file superseded less than the table's retention
window ago (``CleanPolicy.retention_window_s``, 1 hour by default), counted from the write
that superseded it. A read that a clean with a shorter window overtakes reloads the timeline
and reads the new latest snapshot once (a pinned read raises ``InstantCleanedError``)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from _readers_safety import AGGRESSIVE, Interleave, far_future, new_table, process, rows

from lakewarden.storage.local import LocalStorage
from lakewarden.table.clean import CleanPolicy, InstantCleanedError


def opening_data(key: str) -> bool:
    return key.endswith(".parquet")


@pytest.mark.parametrize("window", [False, True], ids=["no-window", "window"])
@pytest.mark.parametrize("policy", AGGRESSIVE, ids=lambda p: p.policy.value)
def test_hudi_5020_a_clean_landing_mid_read_never_breaks_the_read(
    tmp_path: Path, policy: CleanPolicy, window: bool
) -> None:
    writer = new_table(tmp_path / "t")
    raced = Interleave(LocalStorage(tmp_path / "t"))
    reader = process(writer, "reader", raced)
    writer.write(rows("v0"))
    if window:
        policy = policy.model_copy(update={"retention_window_s": 3600.0})
    cleans = []

    def overtake() -> None:  # the reader planned v0's files and opens the first one now
        writer.write(rows("v1", ts=2))
        # Without a window, a week later (every age rule has run out); with it, right now.
        clock = time.time if window else far_future
        cleans.append(process(writer, "cleaner").clean(policy, wall_clock=clock))

    raced.before("local_path", opening_data, overtake)
    result = set(reader.read().column("v").to_pylist())
    assert raced.fired
    if window:  # the read in progress keeps its snapshot: nothing it uses was deleted
        assert result == {"v0"} and cleans[0].files_deleted == 0
    else:  # the clean got there first: the read retried on the new latest snapshot
        assert cleans[0].files_deleted > 0 and result == {"v1"}


def test_hudi_5020_a_pinned_read_overtaken_by_a_clean_is_a_named_error(tmp_path: Path) -> None:
    writer = new_table(tmp_path / "t")
    raced = Interleave(LocalStorage(tmp_path / "t"))
    reader = process(writer, "reader", raced)
    first = writer.write(rows("v0")).instant

    def overtake() -> None:
        writer.write(rows("v1", ts=2))
        process(writer, "cleaner").clean(AGGRESSIVE[0])

    raced.before("local_path", opening_data, overtake)
    with pytest.raises(InstantCleanedError) as err:
        reader.read(as_of=first)
    assert err.value.instant == first and "Help:" in str(err.value)
