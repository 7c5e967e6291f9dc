"""Spark task failures through ``lakewarden.spark.write`` (the campaign's ``spark_task_*``
faults), and what a failed Spark write tells its caller.

Invariant 1 (exclusive output) and 7: a retried attempt's files are never visible; every row
of the write is there exactly once. And a write that does not commit names its cause: the
campaign once saw ``SparkWriteError`` reading "rolled back: None. Spark reported: " (empty)
for an upsert whose profiling raised ``InvalidRecordError`` in a Python worker: PySpark's
``PythonException`` text starts with an empty line and the error line is module-qualified, so
no reason was found, and the empty reason then made the rollback entry itself illegal (the
instant stayed pending until the cleaner came).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _spark_helpers import committed_files, files_on_disk, make_table, rows, spark_df, states

import lakewarden
from lakewarden.faults import Action
from lakewarden.spark import SparkWriteError, _job
from lakewarden.spark._helper import _spark_reason
from lakewarden.table.instant import Transition
from lakewarden.testing.faults import fault_plan, first_attempt

# What PySpark's ``PythonException`` reads like (pyspark.errors.exceptions.captured).
PYTHON_WORKER_ERROR = (
    "\n  An exception was thrown from the Python worker. Please see the stack trace below.\n"
    "Traceback (most recent call last):\n"
    '  File "/x/lakewarden/spark/_arrow.py", line 80, in conform\n'
    "    raise InvalidRecordError(\n"
    "lakewarden.table.write_input.InvalidRecordError: profiling the write, row 3 of the "
    "task's input: record 3 has a null record key (record key field 'key')\n"
)


def test_spark_write_error_reason_names_a_python_workers_error() -> None:
    reason = _spark_reason(RuntimeError(PYTHON_WORKER_ERROR))
    assert reason.startswith("lakewarden.table.write_input.InvalidRecordError: profiling")
    assert "null record key" in reason


def test_spark_write_error_reason_is_never_empty() -> None:
    assert _spark_reason(RuntimeError("\n\n  the only line\n")) == "the only line"
    assert _spark_reason(RuntimeError("")) == "RuntimeError('')"


def test_abandon_with_an_empty_reason_still_rolls_back(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    handle = _job.TableHandle.open(str(tmp_path), None)
    spec, _ = _job.open_write(handle, "insert", settings_json=None)

    _job.abandon(handle, spec, "")

    assert states(table) == [Transition.ROLLED_BACK]
    assert table.timeline()[0].reason == "no reason given (stage abort)"


def test_a_bad_row_fails_the_upsert_naming_its_cause(spark: Any, tmp_path: Path) -> None:
    """The seed-1028 failure, with the error table off: the error names the bad row, and the
    instant is rolled back by the writer, not left to the cleaner."""
    table = make_table(tmp_path / "t", partitioned=False)
    df = spark.createDataFrame(
        [(1, "eu", 1, 1.0, "a"), (None, "eu", 1, 2.0, "b")],
        "id long, region string, ts long, amount double, note string",
    )
    with pytest.raises(SparkWriteError) as caught:
        lakewarden.spark.write(df, table.uri, "upsert", partitions=1)
    message = str(caught.value)
    assert "null record key" in message, message
    assert "was rolled back: " in message
    assert caught.value.reason
    assert states(table) == [Transition.ROLLED_BACK]


@pytest.mark.parametrize("action", ["exit", "raise"])
def test_a_retried_task_attempt_commits_its_rows_once(
    spark: Any, tmp_path: Path, action: Action
) -> None:
    """Attempt 0 of partition 0 dies after its task commit saved its files and manifest (its
    Python worker exits, or it raises); Spark retries it (``local[2,4]``). Every row is in the
    table once, the committed files are attempt 1's, and nothing of attempt 0 is left."""
    table = make_table(tmp_path / "t", partitioned=False, buckets=1)
    data = rows(range(50))
    with fault_plan(first_attempt(0, action=action)):
        lakewarden.spark.write(spark_df(spark, data), table.uri, "insert", partitions=1)
    read = lakewarden.read(table.uri).select(["id", "note"]).to_pylist()
    assert sorted(r["id"] for r in read) == list(range(50))  # once each: not twice
    assert states(table) == [Transition.COMPLETED]
    # Write tokens are <partition>-<stage>-<attempt>: the committed file is attempt 1's.
    tokens = [Path(p).name.split("_")[1].split("-") for p in committed_files(table)]
    assert {int(attempt) for _, _, attempt in tokens} == {1}
    assert files_on_disk(tmp_path / "t") == committed_files(table)
