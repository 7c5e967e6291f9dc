"""The Spark insert a user writes first, beside Delta Lake and Parquet in one Spark session.

``df.write.format("lakewarden").mode("append").save(uri)`` against
``df.write.format("delta").partitionBy("region").save(path)`` and
``df.write.partitionBy("region").parquet(path)``, then each table's upsert of 10% of the keys
(``lakewarden.spark.write(..., "upsert")`` vs Delta's ``MERGE INTO``), its read, and its bytes
on disk: the Spark 4 side of the ``peers`` benchmark (``bench_peers.measure_spark4``, the same
child process with Delta's jars, the same input, rotated rounds, medians) without the
merge-on-read table and without Hudi, which needs its own Spark 3.5 virtualenv.

Figures: lakewarden's insert against Parquet's (goal 1.15x) and against Delta's (goal 1.0x,
seconds in the same session), the upsert against Delta's MERGE (goal 1.0x), bytes after the
upsert against Delta's (goal 1.0x), and the insert's CPU seconds against Parquet's (the box is
shared: CPU says what the work costs when wall time is contended). Every round's figures and
the load are in the details.

Run alone: ``python -m benchmarks spark_insert`` (writes ``benchmarks/results/``).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from benchmarks._registry import BenchContext, Result, benchmark
from benchmarks.bench_peers import PARTITION, spark4_in_child

VARIANTS = ("parquet", "lakewarden", "delta")


def results(spark4: dict[str, Any]) -> list[Result]:
    runs: dict[str, list[dict[str, float]]] = spark4["runs"]
    med = {
        v: {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        for v, rounds in runs.items()
    }
    shape = f"{spark4['rows']:,} rows x 10 columns by {PARTITION}"
    ours, delta, parquet = med["lakewarden"], med["delta"], med["parquet"]
    details = {"upsert_rows": spark4["upsert_rows"], "medians": med, "rounds": runs}
    same = "in the same Spark 4.0 session"
    return [
        Result(
            benchmark="spark_insert",
            metric=f"insert df.write.format('lakewarden'), {shape}, vs Parquet",
            unit="s",
            value=ours["insert"],
            baseline=parquet["insert"],
            baseline_label=f"df.write.partitionBy('region').parquet {same}",
            goal=1.15,
            details=details,
        ),
        Result(
            benchmark="spark_insert",
            metric=f"insert df.write.format('lakewarden'), {shape}, vs Delta",
            unit="s",
            value=ours["insert"],
            baseline=delta["insert"],
            baseline_label=f"df.write.format('delta').partitionBy('region') {same}",
            goal=1.0,
        ),
        Result(
            benchmark="spark_insert",
            metric=f"insert CPU seconds, {shape}, vs Parquet",
            unit="s",
            value=ours["insert_cpu"],
            baseline=parquet["insert_cpu"],
            baseline_label="Parquet's insert (CPU of the driver, JVM and Python workers)",
        ),
        Result(
            benchmark="spark_insert",
            metric=f"upsert of {spark4['upsert_rows']:,} rows (10%) vs Delta MERGE INTO",
            unit="s",
            value=ours["upsert"],
            baseline=delta["upsert"],
            baseline_label=f"Delta's MERGE INTO ... UPDATE SET * INSERT * {same}",
            goal=1.0,
        ),
        Result(
            benchmark="spark_insert",
            metric="bytes on disk after the upsert vs Delta",
            unit="MB",
            value=ours["bytes"] / 1e6,
            baseline=delta["bytes"] / 1e6,
            baseline_label="Delta's table after its MERGE",
            goal=1.0,
        ),
    ]


@benchmark("spark_insert", "Spark insert (and upsert, bytes): lakewarden vs Delta Lake vs Parquet")
def bench_spark_insert(ctx: BenchContext) -> Iterable[Result]:
    rows, rounds = ctx.scale(2_000_000, 200_000), ctx.scale(3, 1)
    return results(spark4_in_child(rows, rounds, VARIANTS))
