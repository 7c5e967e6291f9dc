"""``MeteredStorage`` counts calls, errors and time per operation, into its own totals or
into a recorder it is given (the committer's ``CommitStatistics``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakewarden.commit.statistics import CommitStatistics
from lakewarden.storage import NotFoundError
from lakewarden.storage.faults import FaultyStorage, InjectedFaultError
from lakewarden.storage.local import LocalStorage
from lakewarden.storage.metered import MeteredStorage


def test_counts_calls_errors_and_time(tmp_path: Path) -> None:
    faulty = FaultyStorage(LocalStorage(tmp_path), latency_s=0.01)
    metered = MeteredStorage(faulty)
    metered.write_if_absent("k", b"x")
    metered.read("k")
    with pytest.raises(NotFoundError):
        metered.read("missing")  # an answer ("absent"), not a failure of the store
    faulty.fail("read")
    with pytest.raises(InjectedFaultError):
        metered.read("k")
    assert [i.key for i in metered.list()] == ["k"]
    stats = metered.stats()
    assert set(stats) == {"write_if_absent", "read", "list"}
    assert (stats["read"].calls, stats["read"].errors) == (3, 1)
    assert (stats["write_if_absent"].calls, stats["write_if_absent"].errors) == (1, 0)
    assert stats["read"].seconds >= 0.03  # three calls through 10 ms of injected latency


def test_records_into_a_given_recorder_with_a_prefix(tmp_path: Path) -> None:
    statistics = CommitStatistics()
    metered = MeteredStorage(LocalStorage(tmp_path), recorder=statistics, prefix="op_")
    metered.write("k", b"x")
    assert metered.timed("realpath", lambda: 42) == 42  # a call outside the interface
    metered.record("rename", 0.003, samples=3)  # a batch made on the local fast path
    assert statistics.counters() == {"op_write": 1, "op_realpath": 1, "op_rename": 3}
    with pytest.raises(TypeError, match="the totals are in"):
        metered.stats()
