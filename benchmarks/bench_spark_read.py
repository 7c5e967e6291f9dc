"""Spark reads of a lakewarden table against ``spark.read.parquet`` of the same files, and the
table's bytes on disk against Spark's own Parquet files of the same rows.

The table: 2M rows x 10 columns (the columns of ``bench_spark``), partitioned by region, 4
buckets (16 file groups), written with ``Table.write`` (pyarrow, this process: the Spark write
path is ``bench_spark``'s subject), then 10% of the keys upserted. One local SparkSession
(``local[2]``):

- **read**: ``spark.read.format("lakewarden").load(uri)`` (and with ``option("as_of", ...)``
  the insert: the snapshot before the upsert, whose files differ, same cost class) and
  ``lakewarden.spark.read(spark, uri)`` (planning on the driver included) against
  ``spark.read.parquet(*files)`` of exactly the snapshot's files (the table's 10 columns: the
  files also hold the 4 meta columns), both (a) drained into the
  ``noop`` sink (every column of every row) and (b) ``count(*)`` + ``sum(price)``. Rounds
  interleaved with the order rotated, medians. Goal: 1.2x. The details also give one
  incremental read (``since`` the insert: the upserted 10%). The format's read must take
  Spark's Parquet reader (its JVM side, from the read manifest): the benchmark refuses to
  report a Python read as the format's figure.
- **bytes**: the Parquet bytes of the snapshot after the upsert against
  ``df.write.partitionBy("region").parquet`` of the same rows (Spark's writer, snappy); the
  details give every file on disk (the superseded slices too, as Delta keeps its old files
  until VACUUM), and the same files rewritten with pyarrow's default options (what lakewarden
  wrote before ``lakewarden.table.parquet_options``).

Run alone with ``python -m benchmarks spark_read [--quick]`` (200k rows).
"""

from __future__ import annotations

import io
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks._registry import BenchContext, Result, benchmark
from benchmarks._rounds import rotated_rounds

REGIONS = np.array(["eu", "us", "apac", "latam"])


def rows(ids: np.ndarray, ts_offset: int = 0) -> pa.Table:
    """The columns of ``bench_spark`` for ``ids``, in pyarrow."""
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "region": pa.array(REGIONS[ids % 4]),
            "ts": pa.array(ids * 3 + ts_offset),
            "qty": pa.array((ids % 1000).astype(np.int32)),
            "price": pa.array(ids / 7.0),
            "discount": pa.array((ids % 100) / 100.0),
            "tax": pa.array(ids * 0.19),
            "customer": pa.array(np.char.add("customer-", ((ids * 31) % 100_000).astype(str))),
            "sku": pa.array(np.char.add("sku-", (ids % 5000).astype(str))),
            "paid": pa.array(ids % 2 == 0),
        }
    )


def _session() -> Any:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("lakewarden-bench-spark-read")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def _elapsed(func: Callable[[], Any]) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def _parquet_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.parquet"))


def _default_options_bytes(root: Path) -> int:
    """The table's files rewritten with pyarrow's default writer options."""
    total = 0
    for path in root.rglob("*.parquet"):
        buffer = io.BytesIO()
        pq.write_table(pq.ParquetFile(path).read(), buffer)
        total += len(buffer.getvalue())
    return total


def _table(root: Path, count: int) -> tuple[str, str, list[str]]:
    """The table's URI, its insert instant and its snapshot's file paths (Spark's names)."""
    from lakewarden.api.table import Table

    data = rows(np.arange(count, dtype=np.int64))
    schema = data.schema.set(0, pa.field("id", pa.int64(), nullable=False))
    table = Table.create(
        str(root / "table"),
        name="bench",
        record_key="id",
        schema=schema,
        partition_by=["region"],
        ordering_field="ts",
        buckets=4,
    )
    insert = table.write(data.cast(schema), "insert").instant
    ids = np.arange(count, dtype=np.int64)
    table.write(rows(ids[ids % 10 == 3], ts_offset=1).cast(schema), "upsert")
    files = [
        f"file://{root / 'table' / s.base_file.path}"
        for s in table.snapshot().slices.values()
        if s.base_file is not None
    ]
    return table.uri, insert, files


def measure(count: int, rounds: int) -> dict[str, Any]:
    """Read timings (seconds, medians over ``rounds``) and bytes."""
    import lakewarden.spark

    spark = _session()
    root = Path(tempfile.mkdtemp(prefix="lakewarden-bench-spark-read-"))
    try:
        lakewarden.spark.register(spark)
        uri, insert, files = _table(root, count)
        table_bytes = _parquet_bytes(root / "table")
        snapshot_bytes = sum(Path(f.removeprefix("file://")).stat().st_size for f in files)
        default_bytes = _default_options_bytes(root / "table")
        spark.read.parquet(*files).write.partitionBy("region").parquet(str(root / "spark"))
        spark_bytes = _parquet_bytes(root / "spark")

        def full(frame: Callable[[], Any]) -> float:
            return _elapsed(lambda: frame().write.format("noop").mode("overwrite").save())

        def count_sum(frame: Callable[[], Any]) -> float:
            return _elapsed(lambda: frame().selectExpr("count(*)", "sum(price)").collect())

        ours = lambda: lakewarden.spark.read(spark, uri)  # noqa: E731
        fmt = lambda: spark.read.format("lakewarden").load(uri)  # noqa: E731
        fmt_as_of = lambda: (  # noqa: E731
            spark.read.format("lakewarden").option("as_of", insert).load(uri)
        )
        # The table's columns only: the files also hold the four _lw_* meta columns, which
        # the table read does not return (reading them too would flatter lakewarden).
        columns = rows(np.arange(1)).column_names
        base = lambda: spark.read.parquet(*files).select(*columns)  # noqa: E731
        # untimed warm-up: JIT, codecs, the file system caches
        full(ours), full(base), full(fmt), count_sum(fmt_as_of)
        plan = fmt()._jdf.queryExecution().executedPlan().toString()
        if "ParquetScan" not in plan:  # the JVM side did not take the read: say so, loudly
            raise RuntimeError(f"format('lakewarden') did not take the Parquet path:\n{plan}")
        times = rotated_rounds(
            rounds,
            {
                "full_format": lambda _: full(fmt),
                "full_lakewarden": lambda _: full(ours),
                "full_parquet": lambda _: full(base),
                "agg_format": lambda _: count_sum(fmt),
                "agg_format_as_of": lambda _: count_sum(fmt_as_of),
                "agg_lakewarden": lambda _: count_sum(ours),
                "agg_parquet": lambda _: count_sum(base),
            },
        )
        since = count_sum(lambda: lakewarden.spark.read(spark, uri, since=insert))
        return {
            "rows": count,
            "files": len(files),
            **{f"{k}_s": statistics.median(v) for k, v in times.items()},
            **{f"{k}_all_s": v for k, v in times.items()},
            "since_count_sum_s": since,
            "table_bytes": table_bytes,
            "snapshot_bytes": snapshot_bytes,
            "pyarrow_default_options_bytes": default_bytes,
            "spark_parquet_bytes": spark_bytes,
        }
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


@benchmark(
    "spark_read",
    "Spark reads via format('lakewarden') and lakewarden.spark.read vs spark.read.parquet; bytes",
)
def bench_spark_read(ctx: BenchContext) -> Iterable[Result]:
    numbers = measure(ctx.scale(2_000_000, 200_000), ctx.scale(3, 2))
    rows_label = f"{numbers['rows']:,} rows x 10 columns, {numbers['files']} files"
    details = {k: v for k, v in numbers.items() if k.endswith("_all_s")}
    details["since_count_sum_s"] = numbers["since_count_sum_s"]
    yield Result(
        benchmark="spark_read",
        metric=f"format('lakewarden') full read {rows_label} (noop sink)",
        unit="s",
        value=numbers["full_format_s"],
        baseline=numbers["full_parquet_s"],
        baseline_label="spark.read.parquet of the same files, the same columns",
        goal=1.2,
    )
    yield Result(
        benchmark="spark_read",
        metric=f"format('lakewarden') count(*) + sum(price), {rows_label}",
        unit="s",
        value=numbers["agg_format_s"],
        baseline=numbers["agg_parquet_s"],
        baseline_label="spark.read.parquet of the same files, the same columns",
        goal=1.2,
    )
    yield Result(
        benchmark="spark_read",
        metric=f"format('lakewarden').option('as_of', insert) count(*) + sum(price), {rows_label}",
        unit="s",
        value=numbers["agg_format_as_of_s"],
        baseline=numbers["agg_parquet_s"],
        baseline_label="spark.read.parquet of the same files, the same columns",
        goal=1.2,
    )
    yield Result(
        benchmark="spark_read",
        metric=f"lakewarden.spark.read full read {rows_label} (noop sink)",
        unit="s",
        value=numbers["full_lakewarden_s"],
        baseline=numbers["full_parquet_s"],
        baseline_label="spark.read.parquet of the same files, the same columns",
        goal=1.2,
        details=details,
    )
    yield Result(
        benchmark="spark_read",
        metric=f"lakewarden.spark.read count(*) + sum(price), {rows_label}",
        unit="s",
        value=numbers["agg_lakewarden_s"],
        baseline=numbers["agg_parquet_s"],
        baseline_label="spark.read.parquet of the same files, the same columns",
        goal=1.2,
    )
    yield Result(
        benchmark="spark_read",
        metric="Parquet bytes of the snapshot after a 10% upsert",
        unit="MB",
        value=numbers["snapshot_bytes"] / 1e6,
        baseline=numbers["spark_parquet_bytes"] / 1e6,
        baseline_label="Spark's Parquet of the same rows (snappy)",
        details={
            "on_disk_mb": numbers["table_bytes"] / 1e6,
            "on_disk_with_pyarrow_default_options_mb": numbers["pyarrow_default_options_bytes"]
            / 1e6,
        },
    )
