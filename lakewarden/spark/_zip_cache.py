"""Keep PySpark workers from re-reading every zip on ``sys.path`` before each task.

Found by profiling the plain-format insert (``python -m benchmarks.profile_spark insert``):
before every task, and before every planner call (``create_writer``, ``commit``), PySpark's
worker runs ``importlib.invalidate_caches()`` (``pyspark.worker_util.setup_spark_files``) so
that files added with ``addPyFile`` are found. On Python 3.11 that makes every cached
``zipimport.zipimporter`` re-read its archive's whole central directory, in Python. A worker
holds about sixteen: one per package imported from ``pyspark.zip`` (Spark puts it on
``PYTHONPATH`` ahead of site-packages), py4j's zip, and Spark 4's ``spark-core`` jar (also on
``PYTHONPATH``, thousands of entries): a large share of a write task's CPU in Python.

``install()`` makes ``zipimporter.invalidate_caches`` of this process re-read an archive only
when the file changed: a changed size, modification time or inode (a zip replaced in place,
as ``addPyFile`` of a newer file does) is re-read exactly as before; a new zip is a new path,
read when first imported from, as before. Installed once, only inside a PySpark Python worker
(the variable ``PYTHON_WORKER_FACTORY_SECRET`` that Spark sets for them): a worker that Spark
reuses (``spark.python.worker.reuse``, the default) keeps it for every later task; its first
task still pays once per archive. Set ``LAKEWARDEN_SPARK_ZIP_CACHE=0`` to keep Python's own
behaviour.
"""

from __future__ import annotations

import os
import zipimport
from typing import Any

__all__ = ["in_pyspark_worker", "install"]

_MARK = "_lakewarden_keeps_unchanged_zips"
_SIGNATURE = "_lakewarden_zip_signature"


def in_pyspark_worker() -> bool:
    """True inside a Python process that Spark started for tasks or planning."""
    return "PYTHON_WORKER_FACTORY_SECRET" in os.environ


def install(*, force: bool = False) -> bool:
    """Install the check (idempotent) inside a PySpark worker, or anywhere with ``force``;
    True if it is installed now."""
    importer: Any = zipimport.zipimporter
    if getattr(importer, _MARK, False):
        return True
    if os.environ.get("LAKEWARDEN_SPARK_ZIP_CACHE") == "0":
        return False
    if not (force or in_pyspark_worker()):
        return False
    reread = importer.invalidate_caches

    def invalidate_caches(self: Any) -> None:
        signature = _signature(self.archive)
        if signature is not None and getattr(self, _SIGNATURE, None) == signature:
            return  # the archive is the one this importer read: nothing to reload
        reread(self)
        setattr(self, _SIGNATURE, signature)

    invalidate_caches.__doc__ = reread.__doc__
    importer.invalidate_caches = invalidate_caches
    setattr(importer, _MARK, True)
    return True


def _signature(path: str) -> tuple[int, int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None  # gone or unreadable: let Python decide, as it always did
    return stat.st_size, stat.st_mtime_ns, stat.st_ino
