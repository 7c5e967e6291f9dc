"""A driver-owned write whose rows go through lakewarden's task code in Spark's Python workers.

``df.mapInArrow`` hands each task's Arrow batches to ``_task.write_task``, the code the
``lakewarden`` format's tasks run (pyarrow writes the files into the task attempt's directory,
bad rows go to the error table, the task commit saves the attempt's manifest); each task
returns its ``TaskCommitMessage`` as one row, and ``collect`` brings them to the driver, which
commits them itself (``_job.commit_write``).

It is the format's batch write without the format: no planner worker building a writer for
every write, and the commit runs in the driver's process with the table, timeline and
job-committer client a streaming query keeps (``_stream_session``), not in a fresh Python
worker that opens all three again. For micro-batches that is the faster writer (measured in
``python -m benchmarks ingest``; see ``_micro_batch``).

Attempts: Spark returns one result per partition, from the attempt that succeeded; the job
commit takes exactly the attempts those messages name, so a failed, retried or speculative
attempt's files stay in its own directory until the job's cleanup (``lakewarden.commit``).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator

import pyarrow as pa
from pyspark.sql import DataFrame

from lakewarden.spark._arrow import check_write_schema
from lakewarden.spark._bad_rows import INGEST_COLUMNS
from lakewarden.spark._messages import TaskCommitMessage
from lakewarden.spark._options import WriteSpec
from lakewarden.table.config import TableConfig

_MESSAGE = "message"


def write(df: DataFrame, spec: WriteSpec, config: TableConfig) -> list[TaskCommitMessage]:
    """Write ``df``'s rows as tasks of ``spec``'s open instant; the messages of the attempts
    Spark accepted, one per partition.

    Raises: SchemaMismatchError (before any task runs), or whatever Spark raises for a failed
    task (a bad value fails it with the record named)."""
    ignore = INGEST_COLUMNS if spec.ingest_errors else ()
    check_write_schema(df.schema, config, spec.operation, ignore=ignore)

    def write_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from lakewarden.spark._task import current_task, write_task

        message = write_task(spec, current_task(), batches)
        yield pa.record_batch({_MESSAGE: pa.array([pickle.dumps(message)], pa.binary())})

    rows = df.mapInArrow(write_partition, f"{_MESSAGE} binary").collect()
    return [pickle.loads(row[_MESSAGE]) for row in rows]
