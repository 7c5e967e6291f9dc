"""Streaming: every micro-batch one instant, committed exactly once across restarts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _spark_helpers import SCHEMA, make_table, rows, sorted_rows, spark_rows

import lakewarden
from lakewarden.table.instant import Transition
from lakewarden.testing.faults import Fault, fault_plan

pytestmark = [pytest.mark.spark, pytest.mark.slow]

FILES = 4
ROWS_PER_FILE = 25


def _run(spark: Any, source: Path, checkpoint: Path, uri: str, *faults: Fault) -> bool:
    """One run of the query, under ``faults``, until its input is consumed; False if it
    failed."""
    stream = (
        spark.readStream.schema("id long, region string, ts long, amount double, note string")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(source))
        .writeStream.format("lakewarden")
        .option("checkpointLocation", str(checkpoint))
    )
    with fault_plan(*faults):
        query = stream.trigger(availableNow=True).start(uri)
        try:
            # Until the query ends by itself (available-now) or fails; pytest-timeout bounds
            # it. A bound here would return early on a loaded machine with the query running.
            query.awaitTermination()
        except Exception:  # noqa: BLE001 - StreamingQueryException: the run died as intended
            return False
    return query.exception() is None


def test_killed_and_restarted_query_commits_every_batch_exactly_once(
    spark: Any, tmp_path: Path
) -> None:
    table = make_table(tmp_path / "table")
    uri = str(tmp_path / "table")
    source = tmp_path / "source"
    source.mkdir()
    batches = [rows(range(i * ROWS_PER_FILE, (i + 1) * ROWS_PER_FILE)) for i in range(FILES)]
    for i, batch in enumerate(batches):
        pq.write_table(batch.cast(SCHEMA), source / f"part-{i}.parquet")
    checkpoint = tmp_path / "checkpoint"

    # Run 1 dies right after lakewarden committed batch 1, before Spark recorded it.
    after_1 = Fault(point="spark.stream.after_batch_commit", action="raise", where={"batch": 1})
    assert not _run(spark, source, checkpoint, uri, after_1)
    # Run 2 re-runs batch 1 (finds it committed: no second commit), dies inside batch 2.
    task_0 = Fault(point="spark.task.before_write", action="raise", where={"partition": 0})
    assert not _run(spark, source, checkpoint, uri, task_0)
    # Run 3 redoes batch 2 and finishes.
    assert _run(spark, source, checkpoint, uri)

    everything = pa.concat_tables(batches)
    assert sorted_rows(lakewarden.read(uri)) == sorted_rows(everything)
    assert spark_rows(spark.read.format("lakewarden").load(uri)) == sorted_rows(everything)
    completed = [i for i in table.timeline() if i.state is Transition.COMPLETED]
    batches = [i.commit.batch for i in completed if i.commit and i.commit.batch]
    assert sorted(b.batch_id for b in batches) == list(range(FILES))  # each batch exactly once
    assert len({b.query_id for b in batches}) == 1
    rolled_back = [i for i in table.timeline() if i.state is Transition.ROLLED_BACK]
    assert len(rolled_back) == 1  # batch 2 of run 2
