"""A streaming query's driver for ``test_micro_batch``'s kill test, in a process of its own
(the test SIGKILLs its process group: the Python driver and its JVM, as a crash would)::

    LAKEWARDEN_FAULT_PLAN=... python _micro_batch_driver.py <source dir> <checkpoint> <table uri>

It streams the Parquet files of ``<source dir>`` (one per micro-batch) into the table through
``MicroBatchWriter``; the test's fault plan pauses it after micro-batch 1 committed
(``spark.stream.after_batch_commit``): the batch is completed in the table and not yet in
Spark's commit log. The test kills the process there.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SOURCE, CHECKPOINT, URI = sys.argv[1:4]
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pyspark.sql import SparkSession  # noqa: E402

from lakewarden.spark._micro_batch import MicroBatchWriter  # noqa: E402

STREAM_SCHEMA = "id long, region string, ts long, amount double, note string"


def main() -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("lakewarden-micro-batch-kill")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "512m")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    writer = MicroBatchWriter(URI, checkpoint=CHECKPOINT)
    query = (
        spark.readStream.schema(STREAM_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .parquet(SOURCE)
        .writeStream.foreachBatch(writer)
        .option("checkpointLocation", CHECKPOINT)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


if __name__ == "__main__":
    main()
