"""``MeteredStorage`` counts calls, errors and time per operation."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakewarden.storage import NotFoundError
from lakewarden.storage.faults import FaultyStorage
from lakewarden.storage.local import LocalStorage
from lakewarden.storage.metered import MeteredStorage


def test_counts_calls_errors_and_time(tmp_path: Path) -> None:
    metered = MeteredStorage(FaultyStorage(LocalStorage(tmp_path), latency_s=0.01))
    metered.write_if_absent("k", b"x")
    metered.read("k")
    with pytest.raises(NotFoundError):
        metered.read("missing")
    assert [i.key for i in metered.list()] == ["k"]
    stats = metered.stats()
    assert set(stats) == {"write_if_absent", "read", "list"}
    assert (stats["read"].calls, stats["read"].errors) == (2, 1)
    assert (stats["write_if_absent"].calls, stats["write_if_absent"].errors) == (1, 0)
    assert stats["read"].seconds >= 0.02  # two calls through 10 ms of injected latency
