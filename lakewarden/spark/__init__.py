"""The ``lakewarden`` Spark data source (PySpark 4 Python Data Source API).

    import lakewarden.spark
    lakewarden.spark.register(spark)                       # once per SparkSession

    df.write.format("lakewarden").mode("append").save(uri)             # insert (append)
    df.write.format("lakewarden").mode("overwrite").save(uri)          # replace everything
    lakewarden.spark.write(df, uri, operation="upsert")                # upsert / delete
    lakewarden.spark.read(spark, uri)                                  # Spark's Parquet reader
    lakewarden.spark.read(spark, uri, as_of=instant)                   # (also since=, columns=)
    spark.read.format("lakewarden").load(uri)                          # latest snapshot
    spark.read.format("lakewarden").option("as_of", instant).load(uri) # time travel
    spark.read.format("lakewarden").option("since", instant).load(uri) # incremental
    df.writeStream.format("lakewarden").option("checkpointLocation", cp).start(uri)
    lakewarden.spark.run_table_service(spark, uri, plan_instant)       # clustering / compaction

Every write is one instant on the table's timeline and one manifest-committer job: task
attempts write privately, the driver commits exactly the accepted attempts and completes the
instant, or aborts the job and rolls the instant back. See ``_job`` for the protocol,
``_task`` for the executors' side, ``_stream`` for exactly-once micro-batches, ``_service``
for table-service plans (RFC-79) executed as Spark jobs.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from lakewarden._lazy import lazy_exports
from lakewarden.extras import require_extra
from lakewarden.spark import _zip_cache

# Before any module of this package imports pyspark: without the extra, one named error.
require_extra("spark", "The Spark data source")

if TYPE_CHECKING:
    from lakewarden.spark._create import TableOptionsMismatchError
    from lakewarden.spark._fast_read import S3AUnavailableError, read
    from lakewarden.spark._helper import SparkWriteError, write
    from lakewarden.spark._options import InvalidOptionError
    from lakewarden.spark._python import WorkerPythonError
    from lakewarden.spark._service import run_table_service
    from lakewarden.spark._source import FORMAT, LakewardenDataSource
    from lakewarden.spark._transaction import BatchAlreadyCommittedError

# In a PySpark worker only: no re-reading unchanged zips before every task (``_zip_cache``).
_zip_cache.install()

# Imported on first use (PEP 562): every Python worker Spark starts (a task, the planner,
# the commit) imports this package to unpickle the writer, and needs only its own modules,
# not the helper, the reader, the table services: importing those on every fresh worker
# would add their import time to every task.
_EXPORTS: dict[str, str] = {
    "TableOptionsMismatchError": "lakewarden.spark._create",
    "S3AUnavailableError": "lakewarden.spark._fast_read",
    "read": "lakewarden.spark._fast_read",
    "SparkWriteError": "lakewarden.spark._helper",
    "write": "lakewarden.spark._helper",
    "InvalidOptionError": "lakewarden.spark._options",
    "WorkerPythonError": "lakewarden.spark._python",
    "run_table_service": "lakewarden.spark._service",
    "FORMAT": "lakewarden.spark._source",
    "LakewardenDataSource": "lakewarden.spark._source",
    "BatchAlreadyCommittedError": "lakewarden.spark._transaction",
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


def register(spark: Any) -> None:
    """Register the ``lakewarden`` format with ``spark`` (a ``SparkSession``); idempotent.

    Where lakewarden is installed for the Python that Spark runs (``PYSPARK_PYTHON``), Spark
    already found the format through the top-level ``pyspark_lakewarden`` module, and registering
    it again is refused with ``DATA_SOURCE_ALREADY_EXISTS``: that refusal means "done".

    First it checks the Python Spark's workers will run (``lakewarden.spark._python``). Then
    it adds the format's JVM side to the session (``_jvm_udf``: built once with the JDK's
    ``javac``), which hands snapshot reads to Spark's own Parquet reader; without a JDK the
    format stays all-Python, and says so in the log.

    Raises: WorkerPythonError (local mode, PYSPARK_PYTHON unset, and ``python3`` on the PATH
    cannot import lakewarden: every task would fail)."""
    from pyspark.errors import AnalysisException

    from lakewarden.spark._python import check_worker_python
    from lakewarden.spark._source import LakewardenDataSource

    check_worker_python(spark)
    try:
        spark.dataSource.register(LakewardenDataSource)
    except AnalysisException as err:
        if err.getCondition() != "DATA_SOURCE_ALREADY_EXISTS":
            raise
    from lakewarden.spark import _jvm_udf

    try:
        _jvm_udf.register(spark)
    except _jvm_udf.JvmUdfUnavailableError as err:
        logging.getLogger("lakewarden.spark").warning(
            "the lakewarden format's JVM side is not available (%s): spark.read.format"
            "('lakewarden') reads every row through a Python worker",
            err,
        )


__all__ = [
    "FORMAT",
    "BatchAlreadyCommittedError",
    "InvalidOptionError",
    "LakewardenDataSource",
    "S3AUnavailableError",
    "SparkWriteError",
    "TableOptionsMismatchError",
    "WorkerPythonError",
    "read",
    "register",
    "run_table_service",
    "write",
]
