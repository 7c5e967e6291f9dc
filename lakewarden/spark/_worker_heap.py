"""Keep the garbage collection PySpark runs after every worker call from walking what a worker
keeps for its life.

A reused PySpark worker (``spark.python.worker.reuse``, the default) runs ``gc.collect()``
after every call it serves (``pyspark.daemon``): every task, and on the driver every planner
call, which for the ``lakewarden`` format is a writer's creation and a commit. A full
collection walks every container object the process holds, and a worker that has served a
lakewarden call holds tens of thousands that live as long as it does: pyspark's, pyarrow's,
pandas' and lakewarden's modules, the Kafka clients and the stream session it keeps. A
streaming micro-batch pays such a collection for each of its tasks and, in
``writeStream.format("lakewarden")``, for the writer's creation and the commit too: CPU taken
from the next batch's read and parse on the same cores (``python -m benchmarks ingest``).

``settle()`` is called at the start of each call a worker serves. On the process's second
call it moves everything the process holds into the permanent generation (``gc.freeze()``),
which collections skip. The second call is chosen because it starts right after PySpark's
collection of the first call's garbage, with the first call's imports done: what is frozen is
what lives. Objects made after that are collected as before. A frozen object is still freed
when its last reference goes; only a reference cycle among frozen objects that becomes garbage
later is never collected, which bounds what can be lost to what the first call kept.

``lakewarden.spark.daemon`` freezes its preloaded modules before it forks a worker, so a task
worker forked from it walks only its own objects from its first task on. Set
``LAKEWARDEN_SPARK_HEAP_FREEZE=0`` (before the session starts its workers) to keep PySpark's
behaviour.
"""

from __future__ import annotations

import gc
import os
import threading

from lakewarden.spark._zip_cache import in_pyspark_worker

__all__ = ["enabled", "settle"]

_FREEZE_AT_CALL = 2
_calls = 0
_guard = threading.Lock()


def enabled() -> bool:
    """Whether this process freezes its heap (not turned off by the environment)."""
    return os.environ.get("LAKEWARDEN_SPARK_HEAP_FREEZE") != "0"


def settle() -> None:
    """Count a call this worker serves; freeze the heap at the start of the second (module
    docstring). Does nothing outside a PySpark worker."""
    global _calls
    if not (in_pyspark_worker() and enabled()):
        return
    with _guard:
        _calls += 1
        if _calls != _FREEZE_AT_CALL:
            return
    gc.freeze()
