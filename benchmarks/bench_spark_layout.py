"""What a table's layout costs Spark's own Parquet writer: the floor under any insert goal.

The Spark insert's goal is set against ``df.write.parquet`` of the same rows (1.15x). A
lakewarden file holds more than those rows: four meta columns per row (commit time, record
key as text, partition path, file name: what Hudi writes too) and one file per task and file
group (bucket) instead of one per task. This benchmark prices each part *with Spark's own
writer and built-in expressions only* (no lakewarden code, no UDF), beside lakewarden's two
insert paths, on the same cached rows as ``bench_spark``, rounds rotated:

- ``plain``: ``df.write.parquet`` (the baseline of every ratio here);
- ``key``: plus the record key as a text column (``cast(id as string)``: 2M distinct strings);
- ``per_file``: plus the three columns that are constant within a file (commit time, partition
  path, file name built per row with ``concat``);
- ``meta``: plus all four meta columns;
- ``file_groups``: the plain rows split into one file per task and bucket
  (``partitionBy(pmod(hash(id), 4))``, each task's rows sorted by bucket as Spark plans the
  write, as ``lakewarden.spark._native``'s write does);
- ``layout``: meta columns and file groups: Spark's own writer producing lakewarden's layout;
- ``lakewarden_insert``: ``format("lakewarden")`` (the Python data source, pyarrow's writer);
- ``lakewarden_bulk_spark``: ``bulk_insert`` with ``writer=spark`` (``_native``).

Each row reports wall time and CPU seconds of the process tree (JVM and Python workers), both
as ratios to ``plain``. Report only: these are the reasons behind a goal, not a goal. At the
quick size the CPU figures are noise: a Python worker that exits within a round takes its CPU
time with it (PySpark's daemon does not collect its children's times), which can even make a
round's CPU negative; at 2M rows the workers live through the rounds.

Run alone with ``python -m benchmarks.bench_spark_layout [--quick]`` (200k rows, 2 rounds).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from benchmarks._registry import BenchContext, Result, benchmark
from benchmarks._rounds import rotated_rounds
from benchmarks.bench_spark import CPU, _elapsed, _new_table, _session, cached_input

INSTANT = "20261124000000000"
BUCKET = "pmod(hash(id), 4)"
# The file name lakewarden writes per row: "<bucket:08d>-<instant>-<task:05d>..." (_native).
FILE_NAME = (
    f"concat(lpad(cast({BUCKET} as string), 8, '0'), '-{INSTANT}-', "
    "lpad(cast(spark_partition_id() as string), 5, '0'), "
    f"'_0-0-0_{INSTANT}.parquet')"
)
KEY_COLUMN = "cast(id as string) as _lw_record_key"
PER_FILE_COLUMNS = [f"'{INSTANT}' as _lw_commit_time", "'' as _lw_partition_path"]
PER_FILE_COLUMNS.append(f"{FILE_NAME} as _lw_file_name")
VARIANTS = (
    "plain",
    "key",
    "per_file",
    "meta",
    "file_groups",
    "layout",
    "lakewarden_insert",
    "lakewarden_bulk_spark",
)


def measure(rows: int, rounds: int) -> dict[str, Any]:
    """Wall and CPU seconds per variant (lists, one per round)."""
    import lakewarden.spark

    spark = _session()
    root = Path(tempfile.mkdtemp(prefix="lakewarden-bench-layout-"))
    try:
        lakewarden.spark.register(spark)
        df = cached_input(spark, rows)
        frames = {
            "plain": df,
            "key": df.selectExpr(KEY_COLUMN, "*"),
            "per_file": df.selectExpr(*PER_FILE_COLUMNS, "*"),
            "meta": df.selectExpr(*PER_FILE_COLUMNS, KEY_COLUMN, "*"),
        }
        bucketed = {
            "file_groups": df.selectExpr("*", f"{BUCKET} as _bucket"),
            "layout": df.selectExpr(*PER_FILE_COLUMNS, KEY_COLUMN, "*", f"{BUCKET} as _bucket"),
        }

        def plain_write(name: str) -> Callable[[int], float]:
            frame = frames[name]
            return lambda i: _elapsed(lambda: frame.write.parquet(str(root / f"{name}-{i}")), name)

        def grouped_write(name: str) -> Callable[[int], float]:
            writer = bucketed[name].write.partitionBy("_bucket")

            return lambda i: _elapsed(lambda: writer.parquet(str(root / f"{name}-{i}")), name)

        def insert(i: int) -> float:
            uri = _new_table(root, f"insert-{i}")
            save = df.write.format("lakewarden").mode("append").save
            return _elapsed(lambda: save(uri), "lakewarden_insert")

        def bulk_spark(i: int) -> float:
            uri = _new_table(root, f"bulk-{i}")
            options = {"writer": "spark"}
            return _elapsed(
                lambda: lakewarden.spark.write(df, uri, "bulk_insert", options=options),
                "lakewarden_bulk_spark",
            )

        variants: dict[str, Callable[[int], float]] = {n: plain_write(n) for n in frames}
        variants.update({n: grouped_write(n) for n in bucketed})
        variants["lakewarden_insert"] = insert
        variants["lakewarden_bulk_spark"] = bulk_spark
        for run in variants.values():  # untimed warm-up: workers, JIT, codecs
            run(-1)
        CPU.clear()
        wall = rotated_rounds(rounds, variants)
        return {"rows": rows, "wall": wall, "cpu": {n: CPU.pop(n) for n in VARIANTS}}
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


def results(numbers: dict[str, Any]) -> Iterable[Result]:
    """One report-only row per variant against ``plain``, CPU ratio in the details."""
    wall = {n: statistics.median(v) for n, v in numbers["wall"].items()}
    cpu = {n: statistics.median(v) for n, v in numbers["cpu"].items()}
    for name in VARIANTS[1:]:
        yield Result(
            benchmark="spark_layout",
            metric=f"{name}, {numbers['rows']:,} rows x 10 columns",
            unit="s",
            value=wall[name],
            baseline=wall["plain"],
            baseline_label="df.write.parquet of the same cached rows",
            details={
                "cpu_s": cpu[name],
                "plain_cpu_s": cpu["plain"],
                "cpu_ratio": cpu[name] / cpu["plain"] if cpu["plain"] else float("inf"),
                "wall_all_s": numbers["wall"][name],
                "cpu_all_s": numbers["cpu"][name],
            },
        )


@benchmark("spark_layout", "the table layout's cost to Spark's own writer (meta columns, files)")
def bench_spark_layout(ctx: BenchContext) -> Iterable[Result]:
    return results(measure(ctx.scale(2_000_000, 200_000), ctx.scale(3, 2)))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200k rows, 2 rounds")
    args = parser.parse_args()
    for result in bench_spark_layout(BenchContext(quick=args.quick)):
        print(json.dumps(result.as_json(), indent=2))


if __name__ == "__main__":
    main()
