"""Spark's Python daemon with lakewarden's task code imported before it forks a worker.

    SparkSession.builder.config("spark.python.daemon.module", "lakewarden.spark.daemon")

(``ingest_session`` and ``lakewarden table-service --spark`` set it: ``DAEMON_OPTION``.)

**Why.** Spark starts each Python worker by forking its daemon (``pyspark.daemon``), and stops
a worker that has been idle for a minute (``PythonWorkerFactory``'s idle timeout, fixed in
Spark 4). A new worker imports what its task needs on its first task: for a lakewarden write,
pandas and pyarrow (PySpark's Arrow path imports both), pyspark's SQL modules and lakewarden's
task code. So a streaming query pays those imports again on the first micro-batch after every
minute without Python tasks (a trigger interval of a minute or more, a quiet topic, another
query of the session that ran meanwhile), in every new worker: the performance page's
``worker_start`` has what that adds to a micro-batch. The idle timeout cannot be configured;
which modules the daemon imports can (``spark.python.daemon.module``).

**What it does.** ``main`` imports those modules once, in the daemon; calls
``importlib.invalidate_caches()`` once, so that the check ``_zip_cache`` installs has read
every zip archive on the path and a new worker's first task re-reads none of them; freezes
what the imports made (``gc.freeze()``), so that the collection PySpark runs after each of a
worker's tasks skips it (``_worker_heap``); and then runs ``pyspark.daemon``'s own loop.
Every worker it forks has the modules already, in pages it shares with the daemon until it
writes to them (so the daemon is larger than PySpark's, and the workers together smaller).
Nothing else changes: the workers run PySpark's own worker code, and a task imports anything
else it needs as before.

**Fork safety.** The daemon only imports: it starts no thread, pool or client of its own
before forking (a forked child keeps only the thread that forked). Importing pyarrow starts
jemalloc's background thread; jemalloc's fork handlers keep the child's allocator consistent,
as for any program that forks after importing pyarrow.

Every executor's Python must be able to import lakewarden (as for the format itself): a
daemon that cannot start fails every Python task of the application.
"""

from __future__ import annotations

import gc
import importlib

from lakewarden.spark import _worker_heap

# The session option naming this daemon. Spark reads it when it starts the daemon: set it
# when the session is built (the builder, or ``spark-submit --conf``).
DAEMON_OPTION = "spark.python.daemon.module"
DAEMON_MODULE = "lakewarden.spark.daemon"

# What a worker's first lakewarden task would import: PySpark's Arrow path (pandas, pyarrow's
# pandas bridge) and lakewarden's sides of tasks: writes, streaming writes (whose first task
# opens the batch's instant with the job's code), reads, table services. Spark forks the
# format's planner calls (its writer's creation, its commit) from ``pyspark.daemon`` whatever
# the option says, so nothing here is for them.
PRELOADED = (
    "pandas",
    "pyarrow.pandas_compat",
    "pyspark.sql.pandas.serializers",
    "lakewarden.spark._job",
    "lakewarden.spark._python_tasks",
    "lakewarden.spark._reader",
    "lakewarden.spark._service_task",
    "lakewarden.spark._stream",
    "lakewarden.spark._task",
    "lakewarden.spark._writer",
)


def preload() -> None:
    """Import ``PRELOADED``, record the zip archives' signatures and freeze what the imports
    made (module docstring)."""
    for name in PRELOADED:
        importlib.import_module(name)
    importlib.invalidate_caches()
    if _worker_heap.enabled():
        gc.collect()
        gc.freeze()


def main() -> None:
    """Preload, then serve as ``pyspark.daemon`` (which reads its worker module from argv)."""
    preload()
    from pyspark.daemon import manager

    manager()  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    main()
