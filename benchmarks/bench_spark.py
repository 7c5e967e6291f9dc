"""The Spark data source against Spark's own Parquet writer and reader, on the same DataFrame.

One local SparkSession (``local[2]``, the machine has 2 cores) for the whole benchmark. The
input is 2M rows x 10 columns generated with ``spark.range`` and cached (materialised before
anything is timed), so every writer reads the same in-memory rows:

- **insert**: ``df.write.format("lakewarden").mode("append").save(uri)`` into a fresh
  unpartitioned table with 4 buckets (per task, one file per bucket, through the manifest
  committer; requested -> inflight -> completed) against ``df.write.parquet(path)`` (Spark's
  native writer and its FileOutputCommitter). Interleaved, 3 rounds each, medians. Goal: 1.15x.
- **upsert** of 10% of the rows (200k keys, newer ordering values) through
  ``lakewarden.spark.write`` (profile, shuffle by file group, merge with the current base
  files, rewrite the touched file groups) against ``df.write.parquet`` of the same 200k rows:
  report only (the baseline does no merge; it prices the shuffle-and-rewrite).
- **read**: ``spark.read.format("lakewarden").load(uri)`` against ``spark.read.parquet(path)``
  of the files Spark wrote, both drained into the ``noop`` sink (every column of every row
  read). Report only: the Python Data Source API moves rows through a Python worker as Arrow
  batches, where the native reader is vectorised in the JVM.

Run alone with ``python -m benchmarks.bench_spark [--quick]`` (200k rows).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks._registry import BenchContext, Result, benchmark

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("region", pa.string()),
        ("ts", pa.int64()),
        ("qty", pa.int32()),
        ("price", pa.float64()),
        ("discount", pa.float64()),
        ("tax", pa.float64()),
        ("customer", pa.string()),
        ("sku", pa.string()),
        ("paid", pa.bool_()),
    ]
)
COLUMNS = [
    "id",
    "element_at(array('eu', 'us', 'apac', 'latam'), cast(id % 4 + 1 as int)) as region",
    "id * 3 as ts",
    "cast(id % 1000 as int) as qty",
    "id / 7.0 as price",
    "(id % 100) / 100.0 as discount",
    "id * 0.19 as tax",
    "concat('customer-', cast(id * 31 % 100000 as string)) as customer",
    "concat('sku-', cast(id % 5000 as string)) as sku",
    "id % 2 = 0 as paid",
]


def _session() -> Any:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("lakewarden-bench-spark")
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


def _new_table(root: Path, name: str) -> str:
    from lakewarden.table.table import Table

    uri = str(root / name)
    Table.create(uri, name=name, record_key="id", schema=SCHEMA, ordering_field="ts", buckets=4)
    return uri


def measure(rows: int, rounds: int) -> dict[str, Any]:
    """Insert, upsert and read timings (seconds, medians over ``rounds``)."""
    import lakewarden.spark

    spark = _session()
    root = Path(tempfile.mkdtemp(prefix="lakewarden-bench-spark-"))
    try:
        lakewarden.spark.register(spark)
        df = spark.range(rows, numPartitions=4).selectExpr(*COLUMNS).cache()
        df.count()
        ours, base, uris = [], [], []
        # Untimed warm-up of both writers (Python workers, JIT, Parquet codecs).
        _new_table(root, "warmup")
        df.limit(1000).write.format("lakewarden").mode("append").save(str(root / "warmup"))
        df.limit(1000).write.parquet(str(root / "warmup-parquet"))
        for i in range(rounds):  # interleaved, so machine load hits both alike
            base.append(_elapsed(lambda i=i: df.write.parquet(str(root / f"parquet-{i}"))))
            uri = _new_table(root, f"table-{i}")
            ours.append(
                _elapsed(lambda uri=uri: df.write.format("lakewarden").mode("append").save(uri))
            )
            uris.append(uri)
        return {
            "rows": rows,
            "insert_lakewarden_s": statistics.median(ours),
            "insert_parquet_s": statistics.median(base),
            "insert_lakewarden_all_s": ours,
            "insert_parquet_all_s": base,
            **_upsert(spark, df, rows, uris[0], root),
            **_read(spark, uris[0], str(root / "parquet-0"), rounds),
        }
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


def _upsert(spark: Any, df: Any, rows: int, uri: str, root: Path) -> dict[str, Any]:
    import lakewarden.spark

    changed = df.where(f"id % 10 = 3 and id < {rows}").selectExpr(
        *[c if c != "ts" else "ts + 1 as ts" for c in df.columns]
    )
    changed = changed.cache()
    count = changed.count()
    base = _elapsed(lambda: changed.write.parquet(str(root / "upsert-parquet")))
    ours = _elapsed(lambda: lakewarden.spark.write(changed, uri, "upsert"))
    assert spark.read.format("lakewarden").load(uri).count() == rows
    changed.unpersist()
    return {"upsert_rows": count, "upsert_lakewarden_s": ours, "upsert_parquet_write_s": base}


def _read(spark: Any, uri: str, parquet: str, rounds: int) -> dict[str, Any]:
    def drain(reader: Callable[[], Any]) -> float:
        return _elapsed(lambda: reader().write.format("noop").mode("overwrite").save())

    ours, base = [], []
    for _ in range(rounds):
        base.append(drain(lambda: spark.read.parquet(parquet)))
        ours.append(drain(lambda: spark.read.format("lakewarden").load(uri)))
    return {
        "read_lakewarden_s": statistics.median(ours),
        "read_parquet_s": statistics.median(base),
    }


@benchmark("spark", "Spark insert/upsert/read through format lakewarden vs Spark's Parquet")
def bench_spark(ctx: BenchContext) -> Iterable[Result]:
    numbers = measure(ctx.scale(2_000_000, 200_000), ctx.scale(3, 2))
    rows = f"{numbers['rows']:,} rows x 10 columns"
    details = {k: v for k, v in numbers.items() if k.endswith("_all_s") or k == "upsert_rows"}
    yield Result(
        benchmark="spark",
        metric=f"insert {rows}",
        unit="s",
        value=numbers["insert_lakewarden_s"],
        baseline=numbers["insert_parquet_s"],
        baseline_label="df.write.parquet of the same cached DataFrame",
        goal=1.15,
        details=details,
    )
    yield Result(
        benchmark="spark",
        metric=f"upsert {numbers['upsert_rows']:,} rows (10%) into {rows}",
        unit="s",
        value=numbers["upsert_lakewarden_s"],
        baseline=numbers["upsert_parquet_write_s"],
        baseline_label="df.write.parquet of the same rows (no merge)",
    )
    yield Result(
        benchmark="spark",
        metric=f"read {rows} (noop sink)",
        unit="s",
        value=numbers["read_lakewarden_s"],
        baseline=numbers["read_parquet_s"],
        baseline_label="spark.read.parquet of Spark's own files",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200k rows, 2 rounds")
    args = parser.parse_args()
    ctx = BenchContext(quick=args.quick)
    for result in bench_spark(ctx):
        print(json.dumps(result.as_json(), indent=2))


if __name__ == "__main__":
    main()
