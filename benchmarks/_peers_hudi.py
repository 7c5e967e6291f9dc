"""The Hudi side of the peers benchmark: a script for the Hudi virtualenv (pyspark 3.5).

Maven Central has no Hudi bundle for Spark 4.0, so ``bench_peers`` runs this file with
``infra/peers/hudi/venv/bin/python`` (a second process, a second JVM, pyspark 3.5.5 + the
Hudi 1.2.0 Spark 3.5 bundle) and reads one JSON line from its stdout. It imports the standard
library and pyspark only (not lakewarden, not the ``benchmarks`` package, neither of which
that virtualenv has), except ``_rounds`` beside it, which is standard library too.

It measures, on its own Spark, the same three operations as the lakewarden side, with its own
plain-Parquet baseline, so its ratios compare like with like:

- insert: ``format("hudi")`` with ``operation=insert`` into a fresh copy-on-write table (record
  key ``id``, ordering field ``ts``, partitioned like the Parquet baseline) vs
  ``df.write.parquet``;
- upsert: the changed rows with ``operation=upsert`` vs ``df.write.parquet`` of those rows;
- read: ``spark.read.format("hudi")`` drained into the ``noop`` sink vs ``spark.read.parquet``.

Usage (what ``bench_peers`` runs)::

    venv/bin/python benchmarks/_peers_hudi.py --spec '{"rows": ..., "rounds": ..., ...}'
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _rounds import rotated_rounds  # noqa: E402  (standard library only; see the docstring)


def _session(jars: list[str], local_dir: str) -> Any:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("lakewarden-bench-peers-hudi")
        .config("spark.jars", ",".join(jars))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .config("spark.local.dir", local_dir)
        .config("spark.sql.shuffle.partitions", "4")
        # What Hudi's quick start asks of a session.
        .config("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
        .config("spark.kryo.registrator", "org.apache.spark.HoodieSparkKryoRegistrar")
        .config("spark.sql.extensions", "org.apache.spark.sql.hudi.HoodieSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.hudi.catalog.HoodieCatalog"
        )
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def _hudi_options(name: str, operation: str, partition: str | None) -> dict[str, str]:
    options = {
        "hoodie.table.name": name,
        "hoodie.datasource.write.table.type": "COPY_ON_WRITE",
        "hoodie.datasource.write.operation": operation,
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.datasource.write.partitionpath.field": partition or "",
        "hoodie.datasource.write.hive_style_partitioning": "true",
    }
    if partition is None:
        options["hoodie.datasource.write.keygenerator.class"] = (
            "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
        )
    return options


def _timed(func: Callable[[], Any]) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """Seconds per operation and round for ``hudi`` and ``parquet``; bytes after the upsert."""
    rows, rounds, partition = int(spec["rows"]), int(spec["rounds"]), spec.get("partition")
    root = Path(tempfile.mkdtemp(prefix="lakewarden-bench-peers-hudi-"))
    spark = _session(spec["jars"], str(root / "spark-local"))
    try:
        df = spark.range(rows, numPartitions=4).selectExpr(*spec["columns"]).cache()
        df.count()
        changed = df.where(spec["changed_where"]).selectExpr(*spec["changed_columns"]).cache()
        upsert_rows = changed.count()

        def parquet_writer(frame: Any) -> Any:
            writer = frame.write
            return writer.partitionBy(partition) if partition else writer

        def hudi_write(frame: Any, path: Path, operation: str) -> None:
            options = _hudi_options(path.name, operation, partition)
            frame.write.format("hudi").options(**options).mode("append").save(str(path))

        def drain(frame: Any) -> None:
            frame.write.format("noop").mode("overwrite").save()

        def parquet(i: int) -> dict[str, float]:
            path = root / f"parquet-{i}"
            insert = _timed(lambda: parquet_writer(df).parquet(str(path)))
            upsert = _timed(lambda: parquet_writer(changed).parquet(str(root / f"pq-up-{i}")))
            read = _timed(lambda: drain(spark.read.parquet(str(path))))
            return {"insert": insert, "upsert": upsert, "read": read, "bytes": _size(path)}

        def hudi(i: int) -> dict[str, float]:
            path = root / f"hudi_{i}"
            insert = _timed(lambda: hudi_write(df, path, "insert"))
            upsert = _timed(lambda: hudi_write(changed, path, "upsert"))
            read = _timed(lambda: drain(spark.read.format("hudi").load(str(path))))
            return {"insert": insert, "upsert": upsert, "read": read, "bytes": _size(path)}

        # Untimed warm-up of both (JIT, codecs, Hudi's metadata table code paths).
        small = df.limit(1000)
        parquet_writer(small).parquet(str(root / "warmup-parquet"))
        hudi_write(small, root / "warmup_hudi", "insert")
        count = spark.read.format("hudi").load(str(root / "warmup_hudi")).count()
        assert count == 1000, count

        def reported(name: str, run: Callable[[int], dict[str, float]]) -> Any:
            def once(i: int) -> dict[str, float]:
                figures = run(i)
                line = {"side": "spark35", "variant": name, "round": i, **figures}
                line["load1"] = os.getloadavg()[0]
                print("peers-round " + json.dumps(line), file=sys.stderr, flush=True)
                return figures

            return once

        runs = rotated_rounds(
            rounds, {"parquet": reported("parquet", parquet), "hudi": reported("hudi", hudi)}
        )
        # The upsert replaced rows, never added any.
        count = spark.read.format("hudi").load(str(root / "hudi_0")).count()
        assert count == rows, (count, rows)
        return {"rows": rows, "upsert_rows": upsert_rows, "runs": runs}
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


def summary(runs: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Median of every measure per variant."""
    return {
        variant: {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        for variant, rounds in runs.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--spec", required=True, help="JSON: rows, rounds, columns, jars, ...")
    args = parser.parse_args()
    print(json.dumps(measure(json.loads(args.spec))))


if __name__ == "__main__":
    main()
