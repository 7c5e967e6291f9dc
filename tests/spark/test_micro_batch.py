"""Micro-batches committed from the driver (``foreachBatch`` + ``MicroBatchWriter``): every
batch one instant, each committed exactly once across failures, restarts and a SIGKILL of the
driver between lakewarden's commit and Spark's commit log."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _spark_helpers import SCHEMA, make_table, rows, sorted_rows

import lakewarden
from lakewarden.api.table import Table
from lakewarden.spark._micro_batch import MicroBatchWriter
from lakewarden.spark._options import InvalidOptionError
from lakewarden.table.config import META_COMMIT_TIME, META_FILE_NAME, META_PARTITION_PATH
from lakewarden.table.instant import Transition
from lakewarden.testing import wait_until
from lakewarden.testing.faults import Fault, FaultPlan, fault_plan

pytestmark = [pytest.mark.spark, pytest.mark.slow]

FILES = 4
ROWS_PER_FILE = 25
STREAM_SCHEMA = "id long, region string, ts long, amount double, note string"
DRIVER = Path(__file__).with_name("_micro_batch_driver.py")


def _source(tmp_path: Path) -> tuple[Path, pa.Table]:
    source = tmp_path / "source"
    source.mkdir()
    batches = [rows(range(i * ROWS_PER_FILE, (i + 1) * ROWS_PER_FILE)) for i in range(FILES)]
    for i, batch in enumerate(batches):
        pq.write_table(batch.cast(SCHEMA), source / f"part-{i}.parquet")
    return source, pa.concat_tables(batches)


def _run(
    spark: Any, source: Path, checkpoint: Path, writer: MicroBatchWriter, files_per_batch: int = 1
) -> bool:
    """One run of the query until its input is consumed (``files_per_batch`` source files per
    micro-batch, each one input partition); False if it failed."""
    query = (
        spark.readStream.schema(STREAM_SCHEMA)
        .option("maxFilesPerTrigger", files_per_batch)
        .parquet(str(source))
        .writeStream.foreachBatch(writer)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()  # pytest-timeout bounds it
    except Exception:  # noqa: BLE001 - StreamingQueryException: the run died as intended
        return False
    return query.exception() is None


def _batches(table: Table) -> tuple[list[str], set[str]]:
    completed = [i for i in table.timeline() if i.state is Transition.COMPLETED and i.commit]
    batches = [i.commit.batch for i in completed if i.commit and i.commit.batch]
    return sorted(str(b.batch_id) for b in batches), {b.query_id for b in batches}


@pytest.mark.parametrize("kind", ["spark", "python"])
def test_failed_and_restarted_query_commits_every_batch_exactly_once(
    spark: Any, tmp_path: Path, kind: str
) -> None:
    table = make_table(tmp_path / "table")
    uri = str(tmp_path / "table")
    source, everything = _source(tmp_path)
    checkpoint = tmp_path / "checkpoint"

    def writer() -> MicroBatchWriter:
        # A batch is one source file: small enough for one task (``single_task_rows``).
        return MicroBatchWriter(
            uri,
            checkpoint=str(checkpoint),
            writer=kind,  # type: ignore[arg-type]
            max_batch_rows=ROWS_PER_FILE,
            single_task_rows=ROWS_PER_FILE,
        )

    # Run 1 dies right after lakewarden committed batch 1, before Spark recorded it.
    after_1 = Fault(point="spark.stream.after_batch_commit", action="raise", where={"batch": 1})
    with fault_plan(after_1):
        assert not _run(spark, source, checkpoint, writer())
    # Run 2 re-runs batch 1 (finds it committed: skipped), dies inside batch 2's tasks.
    second = writer()
    task_0 = Fault(point="spark.task.before_write", action="raise", where={"partition": 0})
    with fault_plan(task_0):
        assert not _run(spark, source, checkpoint, second)
    assert [(o.batch_id, o.skipped) for o in second.outcomes] == [(1, True)]
    # Run 3 redoes batch 2 and finishes.
    third = writer()
    assert _run(spark, source, checkpoint, third)
    assert [(o.batch_id, o.skipped, o.writer) for o in third.outcomes] == [
        (2, False, kind),
        (3, False, kind),
    ]

    assert sorted_rows(lakewarden.read(uri)) == sorted_rows(everything)
    batch_ids, queries = _batches(table)
    assert batch_ids == [str(b) for b in range(FILES)]  # each batch exactly once
    assert len(queries) == 1
    rolled_back = [i for i in table.timeline() if i.state is Transition.ROLLED_BACK]
    assert len(rolled_back) == 1  # batch 2 of run 2: its files are gone with its job
    assert not list((tmp_path / "table").glob("_temporary/manifest_*/spark"))
    # Each ran as one task; batch 3 reused batch 2's column expressions (Spark's writer).
    assert [(o.columns_reused, o.one_task) for o in third.outcomes] == [
        (False, True),
        (kind == "spark", True),
    ]
    _assert_meta_names_their_instants(table, one_file_per_group=True)


@pytest.mark.parametrize("single_task_rows", [2 * ROWS_PER_FILE, 0])
def test_a_small_batch_of_several_partitions_is_written_by_one_task(
    spark: Any, tmp_path: Path, single_task_rows: int
) -> None:
    """Two source files per micro-batch are two input partitions, so two tasks each write
    their rows of every file group; at most ``single_task_rows`` records, one task writes one
    file per file group (the Python writer, the default)."""
    table = make_table(tmp_path / "table")
    uri = str(tmp_path / "table")
    source, everything = _source(tmp_path)
    writer = MicroBatchWriter(
        uri,
        checkpoint=str(tmp_path / "checkpoint"),
        max_batch_rows=2 * ROWS_PER_FILE,
        single_task_rows=single_task_rows,
    )
    assert _run(spark, source, tmp_path / "checkpoint", writer, files_per_batch=2)
    one_task = single_task_rows > 0
    assert [(o.writer, o.one_task) for o in writer.outcomes] == [("python", one_task)] * 2
    assert sorted_rows(lakewarden.read(uri)) == sorted_rows(everything)
    _assert_meta_names_their_instants(table, one_file_per_group=one_task)


def _assert_meta_names_their_instants(table: Table, *, one_file_per_group: bool) -> None:
    """Every row's commit time is a completed instant, named by its file; with
    ``one_file_per_group``, each instant wrote one file per file group (its rows' partition
    path and bucket), else some instant wrote more files than file groups."""
    meta = table.read(with_meta=True)
    completed = {i.instant for i in table.timeline() if i.state is Transition.COMPLETED}
    files: dict[str, set[tuple[str, str]]] = {}  # (partition path, file name): names repeat
    groups: dict[str, set[tuple[str, str]]] = {}
    for row in meta.select([META_COMMIT_TIME, META_FILE_NAME, META_PARTITION_PATH]).to_pylist():
        instant, name = row[META_COMMIT_TIME], row[META_FILE_NAME]
        assert instant in completed
        assert f"-{instant}-" in name and name.endswith(f"_{instant}.parquet"), (instant, name)
        files.setdefault(instant, set()).add((row[META_PARTITION_PATH], name))
        groups.setdefault(instant, set()).add((row[META_PARTITION_PATH], name.split("-")[0]))
    assert set(files) == completed
    files_per_instant = {instant: len(names) for instant, names in files.items()}
    groups_per_instant = {instant: len(found) for instant, found in groups.items()}
    if one_file_per_group:
        assert files_per_instant == groups_per_instant
    else:
        assert files_per_instant != groups_per_instant


@pytest.mark.timeout(900)  # a second Spark (the killed driver's) starts on a loaded machine
def test_a_driver_killed_after_the_commit_is_skipped_by_the_restart(
    spark: Any, tmp_path: Path
) -> None:
    """SIGKILL of the driver process group (Python and JVM) after micro-batch 1 completed in
    the table and before Spark's commit log has it; the restart (in this process, from the
    same checkpoint: the same query id) re-runs batch 1, finds it committed, skips it."""
    table = make_table(tmp_path / "table")
    uri = str(tmp_path / "table")
    source, everything = _source(tmp_path)
    checkpoint = tmp_path / "checkpoint"
    committed_1 = tmp_path / "committed-1"  # the driver is paused after batch 1's commit
    pause = Fault(
        point="spark.stream.after_batch_commit",
        action="pause",
        where={"batch": 1},
        mark=str(committed_1),
    )
    plan = FaultPlan(faults=(pause,))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, **plan.env()}
    args = [str(source), str(checkpoint), uri]
    log = tmp_path / "driver.log"
    with log.open("w") as stderr:
        driver = subprocess.Popen(
            [sys.executable, str(DRIVER), *args],
            env=env,
            start_new_session=True,  # its own process group: the kill takes the JVM too
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
        try:
            wait_until(
                lambda: committed_1.exists() or driver.poll() is not None,
                timeout_s=600,  # a safety net: it starts a Spark of its own
                what="the killed run's micro-batch 1 completed",
            )
            assert driver.poll() is None, log.read_text()[-3000:]
            assert "1" in _batches(table)[0]
        finally:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    assert not (checkpoint / "commits" / "1").exists()  # Spark never recorded batch 1

    restart = MicroBatchWriter(uri, checkpoint=str(checkpoint))
    assert _run(spark, source, checkpoint, restart)
    assert [(o.batch_id, o.skipped) for o in restart.outcomes] == [
        (1, True),
        (2, False),
        (3, False),
    ]
    assert sorted_rows(lakewarden.read(uri)) == sorted_rows(everything)
    batch_ids, queries = _batches(table)
    assert batch_ids == [str(b) for b in range(FILES)]
    assert len(queries) == 1


def test_an_unknown_writer_is_refused() -> None:
    with pytest.raises(InvalidOptionError, match="writer must be"):
        MicroBatchWriter("/t", writer="jvm")  # type: ignore[arg-type]
