"""Task attempts: a failed first attempt, a straggler with speculation on, two attempts of one
partition (what speculation does on a cluster), and a zombie attempt.

Invariant 1 (exclusive output): nothing written by a failed or superseded attempt is ever
visible or left behind; everything of the accepted attempts of a completed instant is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _spark_helpers import (
    committed_files,
    files_on_disk,
    make_table,
    rows,
    sorted_rows,
    spark_df,
    spark_rows,
    states,
)

import lakewarden
from lakewarden.spark import _job
from lakewarden.spark._messages import TaskCommitMessage
from lakewarden.spark._task import TaskIdentity, write_task
from lakewarden.table.instant import Transition
from lakewarden.testing.faults import Fault, fault_plan, first_attempt

pytestmark = pytest.mark.spark


def test_failed_first_attempt_leaves_no_trace(spark: Any, table_dir: Path) -> None:
    table = make_table(table_dir)
    data = rows(range(120))
    writer = spark_df(spark, data, partitions=3).write.format("lakewarden").mode("append")
    # Attempt 0 of partition 1 fails after its task commit: its files and manifest exist.
    with fault_plan(first_attempt(1)):
        writer.save(str(table_dir))

    assert states(table) == [Transition.COMPLETED]
    assert spark_rows(spark.read.format("lakewarden").load(str(table_dir))) == sorted_rows(data)
    # Write tokens are <partition>-<stage>-<attempt>: partition 1 is there by attempt 1 only.
    tokens = [Path(p).name.split("_")[1].split("-") for p in committed_files(table)]
    attempts_of_1 = {int(attempt) for part, _, attempt in tokens if part == "1"}
    assert attempts_of_1 == {1}
    assert files_on_disk(table_dir) == committed_files(table)  # no _temporary, no strays


@pytest.mark.slow
def test_a_straggling_task_with_speculation_enabled_commits_every_row_once(
    spark: Any, table_dir: Path
) -> None:
    """A write whose partition 2 straggles (3 s), with ``spark.speculation`` on (conftest),
    commits every row exactly once and leaves nothing behind.

    It cannot produce a speculative attempt: Spark never runs a task's speculative copy on
    the host already running it, and local mode has one host. So it checks only that turning
    speculation on does not harm a job; two attempts of one partition, which speculation
    would cause on a cluster, are driven by
    ``test_two_attempts_of_one_partition_only_the_accepted_one_commits``, and real speculation
    on a two-host cluster by ``test_spark_cluster.py``."""
    table = make_table(table_dir)
    data = rows(range(300))
    writer = spark_df(spark, data, partitions=4).write.format("lakewarden").mode("append")
    straggle = Fault(
        point="spark.task.before_write", action="delay", where={"partition": 2}, seconds=3
    )
    with fault_plan(straggle):
        writer.save(str(table_dir))
    back = spark_rows(spark.read.format("lakewarden").load(str(table_dir)))
    assert back == sorted_rows(data)
    assert files_on_disk(table_dir) == committed_files(table)


def test_two_attempts_of_one_partition_only_the_accepted_one_commits(table_dir: Path) -> None:
    """What speculation does on a cluster, driven through the writer's own code: two
    attempts of partition 0 both write and commit their task; Spark accepts attempt 1."""
    table = make_table(table_dir)
    handle = _job.TableHandle.open(str(table_dir), None)
    spec, _ = _job.open_write(handle, "insert", settings_json=None)
    part0, part1 = rows(range(0, 50)), rows(range(50, 80))

    def attempt(partition: int, number: int, data: pa.Table) -> TaskCommitMessage:
        return write_task(spec, TaskIdentity(partition, number, 7), iter(data.to_batches(16)))

    loser = attempt(0, 0, part0)
    winner = attempt(0, 1, part0)
    other = attempt(1, 0, part1)
    assert loser.write_stats and winner.write_stats
    _job.commit_write(spec, [winner, other])

    assert states(table) == [Transition.COMPLETED]
    assert sorted_rows(lakewarden.read(str(table_dir))) == sorted_rows(
        pa.concat_tables([part0, part1])
    )
    visible = committed_files(table)
    assert {s.path for s in winner.write_stats} <= visible
    assert not {s.path for s in loser.write_stats} & files_on_disk(table_dir)
    assert files_on_disk(table_dir) == visible


def test_zombie_attempt_after_the_job_committed_is_refused(table_dir: Path) -> None:
    make_table(table_dir)
    handle = _job.TableHandle.open(str(table_dir), None)
    spec, _ = _job.open_write(handle, "insert", settings_json=None)
    first = write_task(spec, TaskIdentity(0, 0, 3), iter(rows(range(10)).to_batches()))
    _job.commit_write(spec, [first])

    with pytest.raises(Exception, match="not set up, or already committed"):
        write_task(spec, TaskIdentity(0, 1, 3), iter(rows(range(10)).to_batches()))
    assert files_on_disk(table_dir) == {s.path for s in first.write_stats}


def test_attempts_of_a_retried_stage_keep_their_own_files(table_dir: Path) -> None:
    """Spark numbers the attempts of a retried stage from 0 again (SPARK-24552): partition 0
    runs as attempt 0 in stage attempt 0 (task attempt id 11) and again as attempt 0 in stage
    attempt 1 (task attempt id 23), with other rows (a shuffle's retry need not repeat them).
    Each writes and commits in a committer attempt of its own; the accepted one's rows, and
    only its files, become the table."""
    table = make_table(table_dir)
    handle = _job.TableHandle.open(str(table_dir), None)
    spec, _ = _job.open_write(handle, "insert", settings_json=None)
    first_rows, retried_rows = rows(range(0, 50)), rows(range(100, 130))

    first = write_task(spec, TaskIdentity(0, 0, 7, 11), iter(first_rows.to_batches(16)))
    retried = write_task(spec, TaskIdentity(0, 0, 7, 23), iter(retried_rows.to_batches(16)))
    assert first.attempt_id != retried.attempt_id
    _job.commit_write(spec, [retried])

    assert states(table) == [Transition.COMPLETED]
    assert sorted_rows(lakewarden.read(str(table_dir))) == sorted_rows(retried_rows)
    assert files_on_disk(table_dir) == committed_files(table)  # the first attempt's: gone
