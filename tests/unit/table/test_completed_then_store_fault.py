"""Regression (found by the fault campaign, seed 209: ``completed_without_acknowledgement``):
a store fault after an ingestion's ``completed`` entry landed must not reach its writer as a
failure. Step 6 of the commit (requesting the cancellation of the plans the ingestion
overtook) read the timeline outside its best-effort guard, so a failed listing there raised a
retryable ``StorageIOError`` from ``Table.write`` for a write that had committed: a caller that
retried an insert would have written its records twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakewarden.api.table import Table
from lakewarden.storage.faults import FaultyStorage
from lakewarden.table import job_commit
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.instant import Transition

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def test_completed_without_acknowledgement_a_fault_after_completion_is_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    coordinator = EmbeddedCoordinator()
    created = Table.create(
        str(tmp_path / "t"), name="t", record_key="id", schema=SCHEMA, coordinator=coordinator
    )
    faulty = FaultyStorage(created.storage)
    table = Table(faulty, created.config, coordinator=coordinator)
    real = job_commit.cancel_overtaken_plans

    def listing_fails(*args: Any, **kwargs: Any) -> list[str]:
        faulty.fail("list")  # the next listing, in step 6's reload of the timeline
        return real(*args, **kwargs)

    monkeypatch.setattr(job_commit, "cancel_overtaken_plans", listing_fails)
    result = table.write(pa.Table.from_pylist([{"id": 1, "v": "a"}], schema=SCHEMA), "insert")
    assert faulty.pending("list") == 0, "the fault did not fire: the test proves nothing"
    mine = table.state().get(result.instant)
    assert mine is not None and mine.state is Transition.COMPLETED
    assert table.read().to_pylist() == [{"id": 1, "v": "a"}]
