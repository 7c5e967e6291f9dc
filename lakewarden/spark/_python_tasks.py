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

The write's ``WriteSpec`` reaches the tasks as a local property of the job (Spark hands a
job's local properties to each of its tasks, Python workers included), not in a closure: the
task function is then one module-level function, and its UDF is built once per SparkContext
(``_write_udf``: cloudpickled, its JVM function made) instead of once per write. A streaming
query builds one write per micro-batch, and building the UDF was about half of the driver's
time planning it.

Attempts: Spark returns one result per partition, from the attempt that succeeded; the job
commit takes exactly the attempts those messages name, so a failed, retried or speculative
attempt's files stay in its own directory until the job's cleanup (``lakewarden.commit``).
"""

from __future__ import annotations

import base64
import pickle
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from weakref import WeakKeyDictionary

import pyarrow as pa
from pyspark import SparkContext
from pyspark.sql import DataFrame
from pyspark.sql.udf import UserDefinedFunction

from lakewarden.spark._arrow import check_write_schema
from lakewarden.spark._bad_rows import INGEST_COLUMNS
from lakewarden.spark._messages import TaskCommitMessage
from lakewarden.spark._options import WriteSpec
from lakewarden.table.config import TableConfig

_MESSAGE = "message"
# The local property carrying the write's pickled ``WriteSpec`` (base64: properties are text).
SPEC_PROPERTY = "lakewarden.write.spec"

_udfs: WeakKeyDictionary[SparkContext, UserDefinedFunction] = WeakKeyDictionary()
_udfs_lock = threading.Lock()


def write(df: DataFrame, spec: WriteSpec, config: TableConfig) -> list[TaskCommitMessage]:
    """Write ``df``'s rows as tasks of ``spec``'s open instant; the messages of the attempts
    Spark accepted, one per partition.

    Raises: SchemaMismatchError (before any task runs), or whatever Spark raises for a failed
    task (a bad value fails it with the record named)."""
    ignore = INGEST_COLUMNS if spec.ingest_errors else ()
    check_write_schema(df.schema, config, spec.operation, ignore=ignore)
    context = df.sparkSession.sparkContext
    udf = _write_udf(context)
    column = udf(*[df[name] for name in df.columns])
    # What ``DataFrame.mapInArrow`` does, with the UDF kept (it builds a new one per call).
    tasks = DataFrame(df._jdf.mapInArrow(column._jc, False, None), df.sparkSession)
    with _job_property(context, SPEC_PROPERTY, encode_spec(spec)):
        rows = tasks.collect()
    return [pickle.loads(row[_MESSAGE]) for row in rows]


def encode_spec(spec: WriteSpec) -> str:
    return base64.b64encode(pickle.dumps(spec)).decode("ascii")


def decode_spec(text: str) -> WriteSpec:
    spec = pickle.loads(base64.b64decode(text))
    if not isinstance(spec, WriteSpec):
        raise TypeError(f"{SPEC_PROPERTY} holds a {type(spec).__name__}, not a WriteSpec")
    return spec


def write_partition(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The task function (in a Python worker): write the task's rows under the spec its job
    carries; one row holding the task's pickled commit message."""
    from pyspark import TaskContext

    from lakewarden.spark._task import current_task, write_task

    context = TaskContext.get()
    text = context.getLocalProperty(SPEC_PROPERTY) if context is not None else None
    if text is None:
        raise RuntimeError(f"a lakewarden write task runs in a job that sets {SPEC_PROPERTY}")
    message = write_task(decode_spec(text), current_task(), batches)
    yield pa.record_batch({_MESSAGE: pa.array([pickle.dumps(message)], pa.binary())})


def _write_udf(context: SparkContext) -> UserDefinedFunction:
    """``write_partition`` as the map-in-Arrow UDF of ``context``, built on first use."""
    from pyspark.sql.pandas.functions import pandas_udf
    from pyspark.util import PythonEvalType

    with _udfs_lock:
        udf = _udfs.get(context)
        if udf is None:
            udf = pandas_udf(  # type: ignore[call-overload]  # the stubs miss map-in-Arrow
                write_partition,
                returnType=f"{_MESSAGE} binary",
                functionType=PythonEvalType.SQL_MAP_ARROW_ITER_UDF,
            )
            _udfs[context] = udf
        return udf


@contextmanager
def _job_property(context: SparkContext, key: str, value: str) -> Iterator[None]:
    """``key`` set to ``value`` for the jobs this thread starts in the block (local
    properties are the thread's), then what it was before."""
    before = context.getLocalProperty(key)
    context.setLocalProperty(key, value)
    try:
        yield
    finally:
        context.setLocalProperty(key, before)  # type: ignore[arg-type]  # None removes it
