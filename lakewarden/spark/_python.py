"""The Python that Spark runs: checked once, in ``register``, before a task can fail on it.

Spark starts its Python workers (the data source's planner, every task) with the driver's
``PYSPARK_PYTHON`` environment variable (which ``spark-submit`` sets from
``spark.pyspark.python``), else ``python3`` from the ``PATH``. A script run with a
virtualenv's interpreter without activating the virtualenv has a ``python3`` on its ``PATH``
that lacks pyarrow and lakewarden, and every task then dies with "No module named pyarrow"
deep in a Java stack trace. Spark's own docs advise pointing ``PYSPARK_PYTHON`` at the
driver's interpreter for local mode.

So, when ``PYSPARK_PYTHON`` is unset:

- local mode (``local``, ``local[...]``, ``local-cluster[...]``: the workers run on this
  machine): fine if ``python3`` on the ``PATH`` is this interpreter, or can import lakewarden
  and pyarrow (one short subprocess); otherwise ``WorkerPythonError`` says what Spark will run
  and how to point it at this interpreter. The setting must be made before the session starts
  (the JVM reads it then), so this can only say so, not fix it;
- a cluster: the executors' machines cannot be checked from here; a warning says what they
  need (see docs/operations/deploying.md, "A Spark cluster").
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from functools import cache
from typing import Any

from lakewarden.errors import ConfigurationError

PYTHON_CONF = "spark.pyspark.python"
PYTHON_ENV = "PYSPARK_PYTHON"
SPARK_DEFAULT_PYTHON = "python3"
_PROBE = "import pyarrow, lakewarden.spark"
_PROBE_TIMEOUT_S = 60
log = logging.getLogger("lakewarden.spark")


class WorkerPythonError(ConfigurationError):
    """Spark's Python workers would run an interpreter without lakewarden or pyarrow."""


def configured_python(spark: Any) -> str | None:
    """The Python the workers run: ``PYSPARK_PYTHON``, else None (Spark runs python3).

    PySpark hands its workers the driver's ``PYSPARK_PYTHON`` (``SparkContext.pythonExec``);
    ``spark-submit`` sets it from ``spark.pyspark.python``, but that setting made only in
    ``SparkSession.builder`` of a driver run as plain ``python`` reaches no worker (checked on
    Spark 4.0: the workers then run python3 from the ``PATH``), so it does not count here."""
    value = os.environ.get(PYTHON_ENV)
    return value or None


def _ignored_conf_note(spark: Any) -> str:
    conf = spark.sparkContext.getConf().get(PYTHON_CONF, None)
    if not conf:
        return ""
    return (
        f" ({PYTHON_CONF}={conf} is set in the session's configuration, but PySpark's workers "
        f"run {PYTHON_ENV}, which only spark-submit sets from that setting)"
    )


def is_local_master(master: str) -> bool:
    return master.startswith("local")


def check_worker_python(spark: Any) -> None:
    """The module docstring's check. Raises: WorkerPythonError."""
    if configured_python(spark) is not None:
        return
    master = str(spark.sparkContext.master)
    if not is_local_master(master):
        log.warning(
            "%s / %s are unset: Spark's executors run %r from their PATH, which must have "
            "lakewarden and pyarrow installed (see the docs: operations/deploying.md, "
            "'A Spark cluster')%s",
            PYTHON_CONF,
            PYTHON_ENV,
            SPARK_DEFAULT_PYTHON,
            _ignored_conf_note(spark),
        )
        return
    default = shutil.which(SPARK_DEFAULT_PYTHON)
    if default is not None and (_is_this_interpreter(default) or _can_import(default)):
        return
    found = default or f"no {SPARK_DEFAULT_PYTHON} on the PATH"
    raise WorkerPythonError(
        f"Spark's Python workers would run {SPARK_DEFAULT_PYTHON} ({found}), which cannot "
        f"import lakewarden and pyarrow: {PYTHON_ENV} is unset{_ignored_conf_note(spark)}, and "
        f"this driver runs {sys.executable}. Help: before creating the SparkSession, "
        f"export {PYTHON_ENV}={sys.executable} (or spark-submit --conf "
        f"{PYTHON_CONF}={sys.executable}); or activate the virtualenv."
    )


def _is_this_interpreter(path: str) -> bool:
    # Not realpath: a virtualenv's python is a symlink to the base interpreter, and only the
    # path inside the virtualenv has its packages.
    here = os.path.abspath(sys.executable)
    there = os.path.abspath(path)
    return there == here or os.path.dirname(there) == os.path.dirname(here)


@cache  # lakewarden.spark.write registers per write: probe each interpreter once
def _can_import(python: str) -> bool:
    try:
        done = subprocess.run(
            [python, "-c", _PROBE],
            capture_output=True,
            timeout=_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


__all__ = ["WorkerPythonError", "check_worker_python", "configured_python", "is_local_master"]
