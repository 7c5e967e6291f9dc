"""How ``lakewarden cluster run`` and ``lakewarden compact run`` execute a plan: in this
process, or, with ``--spark``, as a Spark job on a local session started for the command
(``lakewarden.spark.run_table_service``). Spark is imported only when asked for."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import click

from lakewarden.api.table import Table
from lakewarden.extras import require_extra
from lakewarden.settings import Settings
from lakewarden.tableservice import ServiceRun

__all__ = ["Runner", "service_runner", "spark_options"]

Runner = Callable[[Table, str], ServiceRun]
F = TypeVar("F", bound=Callable[..., object])


def spark_options(fn: F) -> F:
    """The ``--spark`` and ``--master`` options of a ``run`` command."""
    fn = click.option(
        "--master",
        default="local[2]",
        show_default=True,
        help="Spark master for --spark.",
    )(fn)
    return click.option(
        "--spark",
        "use_spark",
        is_flag=True,
        help="Run the rewrite as a Spark job (one task per file group).",
    )(fn)


@contextmanager
def service_runner(use_spark: bool, master: str, settings: Settings) -> Iterator[Runner]:
    """A runner for the command's plans; with ``use_spark`` a Spark session lives as long as
    the ``with`` block.

    Raises: WorkerPythonError (Spark's workers cannot import lakewarden)."""
    if not use_spark:
        yield lambda table, instant: table.run_table_service(instant)
        return
    require_extra("spark", "Running table services on Spark")
    from pyspark.sql import SparkSession

    import lakewarden.spark
    from lakewarden.spark.daemon import DAEMON_MODULE, DAEMON_OPTION

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers run this interpreter
    # A session already running in this process (an embedding program) is used, not stopped.
    started = SparkSession.getActiveSession() is None
    session = (
        SparkSession.builder.master(master)
        .appName("lakewarden-table-service")
        .config("spark.ui.showConsoleProgress", "false")
        .config(DAEMON_OPTION, DAEMON_MODULE)  # workers forked with lakewarden imported
        .getOrCreate()
    )
    if started:
        session.sparkContext.setLogLevel("ERROR")
    try:
        yield lambda table, instant: lakewarden.spark.run_table_service(
            session, table.uri, instant, settings=settings
        )
    finally:
        if started:
            session.stop()
