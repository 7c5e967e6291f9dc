"""The Spark data source against Spark's own Parquet writer and reader, on the same DataFrame.

One local SparkSession (``local[2]``, the machine has 2 cores) for the whole benchmark. The
input is 2M rows x 10 columns generated with ``spark.range`` and cached (materialised before
anything is timed), so every writer reads the same in-memory rows:

- **insert**: ``df.write.format("lakewarden").mode("append").save(uri)`` into a fresh
  unpartitioned table with 4 buckets (per task, one file per bucket, through the manifest
  committer; requested -> inflight -> completed) against ``df.write.parquet(path)`` (Spark's
  native writer and its FileOutputCommitter). Interleaved, 3 rounds each, medians. Goal: 1.15x.
- **bulk_insert** through ``lakewarden.spark.write(df, uri, "bulk_insert")`` with option
  ``writer=spark`` (opt-in: it measured slower than the default Python path), which lets
  Spark's own Parquet writer
  write the rows (``lakewarden.spark._native``: the bucket and partition path computed by
  Java UDFs, no row through Python, the files adopted by the manifest committer) against the
  same ``df.write.parquet``, in the same rounds. Goal: 1.15x.
- **upsert** of 10% of the rows (200k keys, newer ordering values) into each insert round's
  table through ``lakewarden.spark.write`` (file groups in the JVM, profile, shuffle by file
  group, merge with the current base files in Python, rewrite the touched file groups)
  against ``repartition(n, "id").write.parquet`` of the same 200k rows, rounds interleaved.
  Goal: 1.3x (the baseline does no merge: it prices the shuffle and the write).
- **read**: ``spark.read.format("lakewarden").load(uri)`` against ``spark.read.parquet(path)``
  of the files Spark wrote, both drained into the ``noop`` sink (every column of every row
  read). Report only: the Python Data Source API moves rows through a Python worker as Arrow
  batches, where the native reader is vectorised in the JVM.

The details also give CPU seconds (this process and all its descendants: the JVM and the
Python workers) and the **floor of the Python Data Source API**: the same DataFrame written to
a Python sink that drops its Arrow batches. On this project's 2-core box that transfer alone
costs about as much CPU as Spark's whole Parquet write, so the insert's wall-time ratio holds
only while spare cores overlap the JVM and the Python worker; under load it tends to the CPU
ratio.

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
from typing import Any, Literal

import pyarrow as pa

from benchmarks._registry import BenchContext, Result, benchmark
from benchmarks._rounds import rotated_rounds

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


def cached_input(spark: Any, rows: int) -> Any:
    """The benchmarks' input: ``rows`` x 10 columns (``COLUMNS``) over 4 partitions, cached and
    materialised, so every writer compared reads the same in-memory rows."""
    df = spark.range(rows, numPartitions=4).selectExpr(*COLUMNS).cache()
    df.count()
    return df


def _session(extra: dict[str, str] | None = None) -> Any:
    """The benchmark's local Spark session; ``extra``: more settings (the profiler's event
    log)."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = SparkSession.builder
    for name, value in (extra or {}).items():
        builder = builder.config(name, value)
    session = (
        builder.master("local[2]")
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


def _tree_cpu() -> float:
    """CPU seconds (user + system) used so far by this process and all its descendants (the
    JVM, PySpark's daemon and workers), from /proc; 0.0 where /proc is missing."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process ended meanwhile
        pid = int(entry.parent.name)
        parents[pid] = int(fields[1])
        # utime, stime, cutime, cstime: children already reaped count with their parent.
        cpu[pid] = sum(int(v) for v in fields[11:15]) / ticks
    mine, total, frontier = {os.getpid()}, 0.0, [os.getpid()]
    while frontier:
        pid = frontier.pop()
        total += cpu.get(pid, 0.0)
        children = [c for c, p in parents.items() if p == pid and c not in mine]
        mine.update(children)
        frontier.extend(children)
    return total


CPU: dict[str, list[float]] = {}


def _elapsed(func: Callable[[], Any], label: str | None = None) -> float:
    """Wall seconds of ``func()``; with a ``label``, its CPU seconds are kept in ``CPU``
    (the box is shared: CPU time says what the work costs when wall time is contended)."""
    cpu = _tree_cpu() if label else 0.0
    start = time.perf_counter()
    func()
    wall = time.perf_counter() - start
    if label:
        CPU.setdefault(label, []).append(_tree_cpu() - cpu)
    return wall


def _register_null_sink(spark: Any) -> None:
    """Format ``lakewarden-bench-null``: a Python data source that drops its Arrow batches,
    the floor of any writer on PySpark's Python Data Source API (defined in a function so
    cloudpickle ships it by value to the workers)."""
    from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

    class NullWriter(DataSourceArrowWriter):
        def write(self, iterator: Iterable[pa.RecordBatch]) -> WriterCommitMessage:
            for _ in iterator:
                pass
            return WriterCommitMessage()

    class NullSink(DataSource):
        @classmethod
        def name(cls) -> str:
            return "lakewarden-bench-null"

        def writer(self, schema: Any, overwrite: bool) -> NullWriter:
            return NullWriter()

    spark.dataSource.register(NullSink)


def _new_table(
    root: Path, name: str, table_type: Literal["copy_on_write", "merge_on_read"] = "copy_on_write"
) -> str:
    from lakewarden.api.table import Table

    uri = str(root / name)
    Table.create(
        uri,
        name=name,
        record_key="id",
        schema=SCHEMA,
        ordering_field="ts",
        buckets=4,
        table_type=table_type,
    )
    return uri


def mor_table(spark_df: Any, root: Path, name: str) -> str:
    """A merge-on-read table holding ``spark_df`` in its buckets' canonical file groups
    (``lakewarden.spark.write(..., "insert")``: the shuffle by file group), so that an upsert
    appends log blocks to their base files. (A plain-format insert writes append groups, and
    the first upsert of a bucket with append groups consolidates them into a base file.)"""
    import lakewarden.spark

    uri = _new_table(root, name, "merge_on_read")
    lakewarden.spark.write(spark_df, uri, "insert")
    return uri


def measure(rows: int, rounds: int) -> dict[str, Any]:
    """Insert, upsert and read timings (seconds, medians over ``rounds``)."""
    import lakewarden.spark

    spark = _session()
    root = Path(tempfile.mkdtemp(prefix="lakewarden-bench-spark-"))
    try:
        lakewarden.spark.register(spark)
        df = cached_input(spark, rows)
        _register_null_sink(spark)
        null = df.write.format("lakewarden-bench-null").mode("append")
        uris: list[str] = []
        # Untimed warm-up of both writers (Python workers, JIT, Parquet codecs).
        _new_table(root, "warmup")
        df.limit(1000).write.format("lakewarden").mode("append").save(str(root / "warmup"))
        df.limit(1000).write.parquet(str(root / "warmup-parquet"))
        null.save()

        def parquet(i: int) -> float:
            return _elapsed(lambda: df.write.parquet(str(root / f"parquet-{i}")), "parquet")

        def lakewarden_bulk_insert(i: int) -> float:
            uri = _new_table(root, f"bulk-{i}")
            spark_writer = {"writer": "spark"}
            return _elapsed(
                lambda: lakewarden.spark.write(df, uri, "bulk_insert", options=spark_writer), "bulk"
            )

        def lakewarden_insert(i: int) -> float:
            uri = _new_table(root, f"table-{i}")
            uris.append(uri)
            return _elapsed(
                lambda: df.write.format("lakewarden").mode("append").save(uri), "lakewarden"
            )

        # interleaved, the order rotated, so machine load hits each alike
        times = rotated_rounds(
            rounds,
            {
                "parquet": parquet,
                "lakewarden": lakewarden_insert,
                "bulk_insert": lakewarden_bulk_insert,
                "null": lambda _: _elapsed(null.save, "null"),
            },
        )
        ours, base, floor = times["lakewarden"], times["parquet"], times["null"]
        bulk = times["bulk_insert"]
        return {
            "rows": rows,
            "insert_lakewarden_s": statistics.median(ours),
            "insert_parquet_s": statistics.median(base),
            "insert_lakewarden_all_s": ours,
            "insert_parquet_all_s": base,
            "bulk_insert_s": statistics.median(bulk),
            "bulk_insert_all_s": bulk,
            "bulk_insert_cpu_s": statistics.median(CPU.pop("bulk", [0.0])),
            "insert_lakewarden_cpu_s": statistics.median(CPU.pop("lakewarden", [0.0])),
            "insert_parquet_cpu_s": statistics.median(CPU.pop("parquet", [0.0])),
            "python_sink_floor_s": statistics.median(floor),
            "python_sink_floor_cpu_s": statistics.median(CPU.pop("null", [0.0])),
            **_upsert(spark, df, rows, uris, _mor_tables(df, root, rounds), root),
            **_read(spark, uris[0], str(root / "parquet-0"), rounds),
        }
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


def _mor_tables(df: Any, root: Path, rounds: int) -> dict[str, Any]:
    """One merge-on-read table per round for the upserts (untimed setup; its time is kept)."""
    uris, times = [], []
    for i in range(rounds):
        start = time.perf_counter()
        uris.append(mor_table(df, root, f"mor-{i}"))
        times.append(time.perf_counter() - start)
    return {"uris": uris, "insert_s": times}


def _upsert(
    spark: Any, df: Any, rows: int, uris: list[str], mor: dict[str, Any], root: Path
) -> dict[str, Any]:
    """The upsert of 10% of the rows into each insert round's table (copy-on-write) and into
    each round's merge-on-read table, against Spark's shuffle of the same rows by the record
    key plus its Parquet write (what a merge costs at least: the rows moved to the task of
    their file group, and written)."""
    import lakewarden.spark
    from lakewarden.api.table import Table
    from lakewarden.table.instant import Action

    changed = df.where(f"id % 10 = 3 and id < {rows}").selectExpr(
        *[c if c != "ts" else "ts + 1 as ts" for c in df.columns]
    )
    changed = changed.cache()
    count = changed.count()
    shuffle = int(spark.conf.get("spark.sql.shuffle.partitions"))

    def parquet(i: int) -> float:
        out = str(root / f"upsert-parquet-{i}")
        return _elapsed(
            lambda: changed.repartition(shuffle, "id").write.parquet(out), "upsert_parquet"
        )

    def upsert(i: int) -> float:
        return _elapsed(lambda: lakewarden.spark.write(changed, uris[i], "upsert"), "upsert")

    actions: list[str] = []

    def upsert_mor(i: int) -> float:
        def run() -> None:
            result = lakewarden.spark.write(changed, mor["uris"][i], "upsert")
            done = Table.open(mor["uris"][i]).state().get(result.instant)
            assert done is not None
            actions.append(str(done.action.value))
            # A deltacommit that appended log blocks and rewrote no base file.
            assert done.action is Action.DELTACOMMIT, done.action
            assert all(s.is_log for s in result.stats.write_stats), "a base file was rewritten"

        return _elapsed(run, "upsert_mor")

    times = rotated_rounds(
        len(uris), {"parquet": parquet, "lakewarden": upsert, "lakewarden_mor": upsert_mor}
    )
    assert spark.read.format("lakewarden").load(uris[0]).count() == rows
    assert spark.read.format("lakewarden").load(mor["uris"][0]).count() == rows
    changed.unpersist()
    return {
        "upsert_mor_s": statistics.median(times["lakewarden_mor"]),
        "upsert_mor_all_s": times["lakewarden_mor"],
        "upsert_mor_cpu_s": statistics.median(CPU.pop("upsert_mor", [0.0])),
        "upsert_mor_actions": actions,
        "mor_setup_insert_all_s": mor["insert_s"],
        "upsert_rows": count,
        "upsert_lakewarden_s": statistics.median(times["lakewarden"]),
        "upsert_parquet_write_s": statistics.median(times["parquet"]),
        "upsert_lakewarden_all_s": times["lakewarden"],
        "upsert_parquet_all_s": times["parquet"],
        "upsert_cpu_s": statistics.median(CPU.pop("upsert", [0.0])),
        "upsert_parquet_cpu_s": statistics.median(CPU.pop("upsert_parquet", [0.0])),
    }


def _read(spark: Any, uri: str, parquet: str, rounds: int) -> dict[str, Any]:
    def drain(reader: Callable[[], Any]) -> float:
        return _elapsed(lambda: reader().write.format("noop").mode("overwrite").save())

    times = rotated_rounds(
        rounds,
        {
            "parquet": lambda _: drain(lambda: spark.read.parquet(parquet)),
            "lakewarden": lambda _: drain(lambda: spark.read.format("lakewarden").load(uri)),
        },
    )
    ours, base = times["lakewarden"], times["parquet"]
    return {
        "read_lakewarden_s": statistics.median(ours),
        "read_parquet_s": statistics.median(base),
    }


@benchmark("spark", "Spark insert/upsert/read through format lakewarden vs Spark's Parquet")
def bench_spark(ctx: BenchContext) -> Iterable[Result]:
    numbers = measure(ctx.scale(2_000_000, 200_000), ctx.scale(3, 2))
    rows = f"{numbers['rows']:,} rows x 10 columns"
    details = {
        k: v
        for k, v in numbers.items()
        if k.endswith(("_all_s", "_cpu_s"))
        or k in ("upsert_rows", "python_sink_floor_s", "upsert_mor_actions")
    }
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
        metric=f"bulk_insert {rows} (Spark's Parquet writer)",
        unit="s",
        value=numbers["bulk_insert_s"],
        baseline=numbers["insert_parquet_s"],
        baseline_label="df.write.parquet of the same cached DataFrame",
        goal=1.15,
    )
    yield Result(
        benchmark="spark",
        metric=f"upsert {numbers['upsert_rows']:,} rows (10%) into {rows}",
        unit="s",
        value=numbers["upsert_lakewarden_s"],
        baseline=numbers["upsert_parquet_write_s"],
        baseline_label="the same rows shuffled by key + df.write.parquet (no merge)",
        goal=1.3,
    )
    yield Result(
        benchmark="spark",
        metric=f"upsert {numbers['upsert_rows']:,} rows (10%) into {rows}, merge-on-read",
        unit="s",
        value=numbers["upsert_mor_s"],
        baseline=numbers["upsert_parquet_write_s"],
        baseline_label="the same rows shuffled by key + df.write.parquet (no merge)",
        goal=1.3,
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
