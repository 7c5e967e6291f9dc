"""The driver program of the cluster tests, submitted as a user submits a job: ``spark-submit
--master <url> --conf spark.pyspark.python=<python> --conf spark.executorEnv.PYTHONPATH=<repo>
_cluster_driver.py <work-dir> <repo-root>``.

A Python process holds one SparkContext, and the test process already holds the local-mode
one (``conftest.spark``), so the cluster session lives here, as a user's job would: one session
for every scenario, results written to ``<work-dir>/results.json`` for the tests to check.
Everything the executors need reaches them through the session's configuration only
(``spark.pyspark.python``, ``spark.executorEnv.PYTHONPATH``, given to ``spark-submit``): the
workers were started without it. (``spark.pyspark.python`` set in ``SparkSession.builder`` of a
plain ``python`` driver does not reach the workers: PySpark takes the workers' interpreter from
the driver's ``PYSPARK_PYTHON`` environment variable, which ``spark-submit`` sets from it.)
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

WORK, REPO = Path(sys.argv[1]), sys.argv[2]
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _spark_helpers import SCHEMA, rows, spark_df, spark_rows  # noqa: E402
from pyspark import TaskContext  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

import lakewarden.spark  # noqa: E402

CREATE = {"record_key": "id", "partition_by": "region", "ordering_field": "ts", "buckets": "2"}
DDL = "id long, region string, ts long, amount double, note string"
STRAGGLER_WAIT_S = 90  # a safety net: the straggler waits for its speculative copy to start


def session() -> Any:
    return (
        SparkSession.builder.appName("lakewarden-cluster-tests")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.memory", "512m")
        .config("spark.executor.cores", "1")
        # Both executors before the first job: the speculative copy needs the second host.
        .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
        .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "120s")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "4")
        .config("spark.local.dir", str(WORK / "local"))
        .config("spark.sql.session.timeZone", "UTC")
        # Aggressive speculation: a copy of a task running 1.5x the median once half the
        # stage is done and it has run 1 s (checked every 100 ms).
        .config("spark.speculation", "true")
        .config("spark.speculation.interval", "100ms")
        .config("spark.speculation.multiplier", "1.5")
        .config("spark.speculation.quantile", "0.5")
        .config("spark.speculation.minTaskRuntime", "1s")
        .getOrCreate()
    )


def as_dicts(table: Any) -> list[dict[str, Any]]:
    return sorted(table.select(SCHEMA.names).to_pylist(), key=lambda r: r["id"])


def create_and_read(spark: Any) -> dict[str, Any]:
    uri = str(WORK / "created")
    writer = spark_df(spark, rows(range(200)), partitions=4).write.format("lakewarden")
    for key, value in CREATE.items():
        writer = writer.option(key, value)
    writer.mode("append").save(uri)
    return {"uri": uri, "read": spark_rows(spark.read.format("lakewarden").load(uri))}


def upsert(spark: Any) -> dict[str, Any]:
    uri = str(WORK / "upserted")
    lakewarden.spark.write(spark_df(spark, rows(range(100))), uri, "insert", options=CREATE)
    changes = spark_df(spark, rows(range(50, 150), ts=2, note="v2"), partitions=3)
    lakewarden.spark.write(changes, uri, "upsert")
    return {"uri": uri, "read": spark_rows(spark.read.format("lakewarden").load(uri))}


def stream(spark: Any) -> dict[str, Any]:
    import pyarrow.parquet as pq

    uri, source = str(WORK / "streamed"), WORK / "stream-source"
    source.mkdir()
    for i in range(2):
        pq.write_table(rows(range(i * 30, (i + 1) * 30)).cast(SCHEMA), source / f"{i}.parquet")
    writer = (
        spark.readStream.schema(DDL)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(source))
        .writeStream.format("lakewarden")
        .option("checkpointLocation", str(WORK / "stream-checkpoint"))
    )
    for key, value in CREATE.items():
        writer = writer.option(key, value)
    query = writer.trigger(availableNow=True).start(uri)
    query.awaitTermination(180)
    return {"uri": uri, "exception": str(query.exception()) if query.exception() else None}


def speculation(spark: Any) -> dict[str, Any]:
    """Attempt 0 of partition 0 straggles until Spark starts a speculative attempt of it."""
    uri, markers = str(WORK / "speculated"), WORK / "attempts"
    markers.mkdir()
    marker_dir = str(markers)

    def straggle_in_partition_0(batch: Any) -> Any:
        ctx = TaskContext.get()
        part, attempt = ctx.partitionId(), ctx.attemptNumber()
        Path(marker_dir, f"{part}-{attempt}-{os.getpid()}").touch()
        if part == 0 and attempt == 0:
            deadline = time.monotonic() + STRAGGLER_WAIT_S
            while time.monotonic() < deadline and not list(Path(marker_dir).glob("0-1-*")):
                time.sleep(0.05)
        yield from batch

    data = rows(range(400))
    df = spark.createDataFrame(
        spark.sparkContext.parallelize(data.to_pylist(), 4).mapPartitions(straggle_in_partition_0),
        schema=DDL,
    )
    writer = df.write.format("lakewarden")
    for key, value in CREATE.items():
        writer = writer.option(key, value)
    writer.mode("append").save(uri)
    return {"uri": uri, "attempts": sorted(p.name for p in markers.iterdir())}


def main() -> None:
    spark = session()
    spark.sparkContext.setLogLevel("ERROR")
    lakewarden.spark.register(spark)
    results: dict[str, Any] = {}
    try:
        for scenario in (create_and_read, upsert, stream, speculation):
            started = time.monotonic()
            try:
                results[scenario.__name__] = scenario(spark)
            except Exception as exc:  # noqa: BLE001 - reported to the test that checks it
                results[scenario.__name__] = {"error": f"{type(exc).__name__}: {exc}"[:4000]}
            results[scenario.__name__]["seconds"] = round(time.monotonic() - started, 1)
    finally:
        (WORK / "results.json").write_text(json.dumps(results, default=str))
        spark.stop()


if __name__ == "__main__":
    main()
