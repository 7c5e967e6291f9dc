"""A Spark driver for ``test_spark_driver_killed.py`` (run as a script, never collected).

    python spark_driver_process.py TABLE_ROOT

Kafka and the heartbeat policy come from the environment (``LAKEWARDEN_*``), so the write
takes timeline-lock's lease and beats to heartbeat-monitor. It writes 20 rows in two Spark
partitions with ``df.write.format("lakewarden")``: partition 0 writes its files and commits its
task, partition 1 sleeps an hour before writing (a ``delay`` at ``spark.task.before_write`` in the
fault plan its Python workers inherit, ``lakewarden.faults``; one core, so it runs after
partition 0), so the driver sits after ``requested``, with files
staged and its heartbeat running, until the test kills it. Spark runs in this process's group
(the JVM and the Python workers are its descendants), so ``killpg`` is a whole-driver kill -9.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

import lakewarden.spark
from lakewarden.testing.faults import Fault, FaultPlan

STUCK = Fault(point="spark.task.before_write", action="delay", where={"partition": 1}, seconds=3600)


def main(table_root: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ.update(FaultPlan(faults=(STUCK,)).env())  # before Spark starts its workers
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("lakewarden-driver-killed")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    lakewarden.spark.register(spark)
    rows = [(i, "eu" if i % 2 else "us", 1, i * 1.5, "v1") for i in range(20)]
    df = spark.createDataFrame(
        rows, schema="id long, region string, ts long, amount double, note string"
    ).repartition(2)
    print("writing", flush=True)
    df.write.format("lakewarden").mode("append").save(table_root)
    print("finished (unexpected)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
