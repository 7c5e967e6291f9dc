"""A Spark write after its Python workers went idle: lakewarden's Python daemon vs PySpark's.

Spark stops a Python worker that has been idle for a minute, and the next task's new worker,
forked from the session's Python daemon, imports what the task needs again
(``lakewarden.spark.daemon``). The daemon is fixed when a session starts, so each side is a
session in a child process of its own: ``ingest_session`` (``local[2]``) with
``spark.python.daemon.module`` = ``lakewarden.spark.daemon`` (what ``ingest_session`` sets) or
``pyspark.daemon`` (Spark's default). In each: a new table, three untimed appends of
``ROWS`` rows (workers started, the JVM warm) the way ``lakewarden ingest`` writes a
micro-batch (``lakewarden.spark.write(..., "bulk_insert")``: the format's task code in
``mapInArrow`` tasks, the commit in the driver), then ``IDLE_S`` seconds without a task (past
Spark's idle timeout), then one append timed (*after idle*) and one more (*warm*). Reported:
the after-idle append with lakewarden's daemon against the same with PySpark's, medians over
rotated rounds; each side's warm append in the details. No Kafka: the writes commit in the
driver.

The format's own batch writes (``df.write.format("lakewarden")``) gain less: Spark runs their
planner calls (the writer's creation, the commit) in workers of its own daemon whatever the
option says, and those workers, stopped after an idle minute too, import lakewarden again.

Run with ``python -m benchmarks worker_start [--quick]`` (quick: one round).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks._registry import BenchContext, Result, benchmark
from benchmarks._rounds import rotated_rounds

ROWS = 2_000
# Spark stops Python workers once none ran a task for 60 s, checking every 10 s.
IDLE_S = 75.0
TABLE = {"record_key": "id", "partition_by": "region"}
# Each side's daemon module (lakewarden.spark.daemon.DAEMON_MODULE and Spark's default); the
# benchmark module imports no lakewarden.spark at its top, so discovery stays light.
DAEMONS = {"lakewarden": "lakewarden.spark.daemon", "pyspark": "pyspark.daemon"}


def _append(spark: Any, uri: str, first: int) -> float:
    """Seconds to append ``ROWS`` rows as ``lakewarden ingest`` writes a micro-batch: the
    format's task code in ``mapInArrow`` tasks, the commit in the driver."""
    import lakewarden.spark

    df = spark.range(first, first + ROWS, numPartitions=2).selectExpr(
        "id", "concat('r', cast(id % 4 as string)) as region", "cast(id as double) as amount"
    )
    began = time.perf_counter()
    lakewarden.spark.write(df, uri, "bulk_insert", options=TABLE)
    return time.perf_counter() - began


def measure(daemon: str, work: Path) -> dict[str, float]:
    """One side (in its child process): the after-idle and warm appends, in seconds."""
    from lakewarden.spark.daemon import DAEMON_OPTION
    from lakewarden.spark.ingest import ingest_session

    spark = ingest_session(
        master="local[2]",
        jars=[],
        local_dir=work / "spark",
        conf={DAEMON_OPTION: daemon},
    )
    try:
        uri = str(work / "table")
        for warm_up in range(3):
            _append(spark, uri, warm_up * ROWS)
        time.sleep(IDLE_S)
        after_idle = _append(spark, uri, 3 * ROWS)
        warm = _append(spark, uri, 4 * ROWS)
    finally:
        spark.stop()
    return {"after_idle_s": after_idle, "warm_s": warm}


def _side(daemon: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="lakewarden-bench-worker-start-") as work:
        result = subprocess.run(
            [sys.executable, "-m", "benchmarks.bench_worker_start", "--child", daemon, work],
            capture_output=True,
            text=True,
            timeout=900,
        )
    if result.returncode != 0:
        raise RuntimeError(f"bench_worker_start child failed: {result.stderr[-3000:]}")
    numbers: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return numbers


def _runner(daemon: str) -> Callable[[int], dict[str, float]]:
    return lambda _: _side(daemon)


@benchmark(
    "worker_start",
    "a micro-batch write after an idle minute: lakewarden's Python daemon vs PySpark's",
)
def worker_start(ctx: BenchContext) -> Iterator[Result]:
    rounds = ctx.scale(2, 1)
    runs = rotated_rounds(rounds, {side: _runner(daemon) for side, daemon in DAEMONS.items()})

    def median(side: str, key: str) -> float:
        return float(statistics.median(run[key] for run in runs[side]))

    yield Result(
        benchmark="worker_start",
        metric=f"micro-batch write of {ROWS:,} rows after {IDLE_S:g} s without a task",
        unit="s",
        value=median("lakewarden", "after_idle_s"),
        baseline=median("pyspark", "after_idle_s"),
        baseline_label=(
            "the same session with PySpark's own daemon (spark.python.daemon.module="
            f"pyspark.daemon); median of {rounds} rotated rounds"
        ),
        details={
            "warm_s": {side: median(side, "warm_s") for side in DAEMONS},
            "runs": runs,
        },
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps(measure(sys.argv[2], Path(sys.argv[3]))))
