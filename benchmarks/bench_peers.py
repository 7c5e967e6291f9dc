"""lakewarden beside its peers: the same insert, upsert and read on Delta Lake and Apache Hudi.

Two processes, each with its own plain-Parquet baseline, so every figure is a ratio to Spark's
own Parquet writer and reader *on the same Spark*:

- **Spark 4.0** (this project's pyspark, a child process whose session has the Delta jars on
  its class path): plain Parquet, lakewarden and Delta Lake 4.0 (``infra/peers/delta``);
- **Spark 3.5** (``infra/peers/hudi/venv``, ``benchmarks/_peers_hudi.py``): plain Parquet and
  Apache Hudi 1.2 (``infra/peers/hudi``). Maven Central has no Hudi bundle for Spark 4.0.

The input is the ``spark`` benchmark's: N rows x 10 columns from ``spark.range``, cached before
anything is timed, here partitioned by ``region`` (4 values) in every format. Per round, the
variants in rotated order (``_rounds``), each on a fresh table:

- **insert** all rows: ``df.write.format("lakewarden")`` (4 buckets per partition),
  ``format("delta")``, ``format("hudi")`` with ``operation=insert`` (copy-on-write) vs
  ``df.write.parquet``;
- **upsert** 10% of the keys with a newer ``ts``: ``lakewarden.spark.write(..., "upsert")``
  on a copy-on-write table (``lakewarden``) and on a merge-on-read one (``lakewarden_mor``:
  the upsert appends log blocks, a deltacommit; its insert goes through
  ``lakewarden.spark.write(df, uri, "insert")`` so the rows sit in the buckets' canonical
  file groups that log blocks extend), Delta's
  ``MERGE INTO ... WHEN MATCHED UPDATE SET * WHEN NOT MATCHED INSERT *``, Hudi's
  ``operation=upsert`` vs ``df.write.parquet`` of the same rows (no merge: it prices the bare
  write of what changed);
- **read** the table after the upsert, every column of every row into the ``noop`` sink
  (lakewarden through ``lakewarden.spark.read``: Spark's own Parquet reader on the snapshot's
  files), vs ``spark.read.parquet`` of the Parquet insert's files.

Rows per peer and operation: the peer's median seconds against its process's Parquet median
(ratio), and one row per operation comparing lakewarden's ratio with each peer's (below 1.0:
lakewarden ahead). Bytes on disk after the upsert are in the details.

Jars and the Hudi virtualenv are fetched on first use (``benchmarks._peers_setup``; ``make
peers-deps``). Run alone: ``python -m benchmarks.bench_peers [--rows N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Literal

from benchmarks import _peers_setup
from benchmarks._registry import BenchContext, Result, benchmark
from benchmarks._rounds import rotated_rounds
from benchmarks.bench_spark import COLUMNS, SCHEMA, cached_input

PARTITION = "region"
OPERATIONS = ("insert", "upsert", "read")
HUDI_SCRIPT = Path(__file__).with_name("_peers_hudi.py")
TIMEOUT_S = 3 * 3600
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def changed_rows(rows: int) -> tuple[str, list[str]]:
    """The upsert's rows: 10% of the keys, ``ts`` one newer (a filter and a projection, so both
    processes build them alike from the same columns)."""
    columns = [c.split(" as ")[-1] for c in COLUMNS]
    return f"id % 10 = 3 and id < {rows}", [c if c != "ts" else "ts + 1 as ts" for c in columns]


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


class _Cpu:
    """The CPU seconds of the last ``_timed`` call (``pop`` them right after it)."""

    last = 0.0

    def pop(self) -> float:
        return self.last


CPU = _Cpu()


def _timed(func: Callable[[], Any]) -> float:
    from benchmarks.bench_spark import _tree_cpu

    cpu = _tree_cpu()
    start = time.perf_counter()
    func()
    wall = time.perf_counter() - start
    CPU.last = _tree_cpu() - cpu
    return wall


def _session(jars: list[Path], local_dir: Path) -> Any:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("lakewarden-bench-peers")
        .config("spark.jars", ",".join(str(j) for j in jars))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .config("spark.local.dir", str(local_dir))
        .config("spark.sql.shuffle.partitions", "4")
        # What Delta's quick start asks of a session (MERGE INTO delta.`path`).
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def measure_spark4(rows: int, rounds: int, only: Iterable[str] = ()) -> dict[str, Any]:
    """Parquet, lakewarden and Delta in this process: seconds per operation and round, bytes
    after the upsert, CPU seconds of the insert (this process and its descendants: the JVM
    and the Python workers). ``only``: these variants (default: all)."""
    import lakewarden.spark
    from lakewarden.api.table import Table

    root = Path(tempfile.mkdtemp(prefix="lakewarden-bench-peers-"))
    spark = _session(_peers_setup.delta_jars(), root / "spark-local")
    try:
        lakewarden.spark.register(spark)
        df = cached_input(spark, rows)
        where, projection = changed_rows(rows)
        changed = df.where(where).selectExpr(*projection).cache()
        upsert_rows = changed.count()
        changed.createOrReplaceTempView("peers_changed")

        def drain(frame: Any) -> None:
            frame.write.format("noop").mode("overwrite").save()

        def parquet(path: Path) -> dict[str, float]:
            return {
                "insert": _timed(lambda: df.write.partitionBy(PARTITION).parquet(str(path))),
                "insert_cpu": CPU.pop(),
                "upsert": _timed(
                    lambda: changed.write.partitionBy(PARTITION).parquet(f"{path}-changed")
                ),
                "read": _timed(lambda: drain(spark.read.parquet(str(path)))),
                "bytes": _size(path),
            }

        def lakewarden_table(
            path: Path, table_type: Literal["cow", "mor"], insert: Callable[[str], Any]
        ) -> dict[str, float]:
            uri = str(path)
            Table.create(
                uri,
                name=path.name,
                record_key="id",
                schema=SCHEMA,
                partition_by=[PARTITION],
                ordering_field="ts",
                buckets=4,
                table_type=table_type,
            )
            return {
                "insert": _timed(lambda: insert(uri)),
                "insert_cpu": CPU.pop(),
                "upsert": _timed(lambda: lakewarden.spark.write(changed, uri, "upsert")),
                "read": _timed(lambda: drain(lakewarden.spark.read(spark, uri))),
                "bytes": _size(path),
            }

        def ours(path: Path) -> dict[str, float]:
            save = df.write.format("lakewarden").mode("append").save
            return lakewarden_table(path, "cow", save)

        def ours_mor(path: Path) -> dict[str, float]:
            # The helper's insert writes each bucket's base file in its canonical file group,
            # so the upsert appends log blocks (a plain-format insert leaves append groups).
            return lakewarden_table(
                path, "mor", lambda uri: lakewarden.spark.write(df, uri, "insert")
            )

        def delta(path: Path) -> dict[str, float]:
            merge = (
                f"MERGE INTO delta.`{path}` t USING peers_changed s ON t.id = s.id "
                "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
            )
            insert = _timed(lambda: df.write.format("delta").partitionBy(PARTITION).save(str(path)))
            insert_cpu = CPU.pop()
            upsert = _timed(lambda: spark.sql(merge).collect())
            read = _timed(lambda: drain(spark.read.format("delta").load(str(path))))
            return {
                "insert": insert,
                "insert_cpu": insert_cpu,
                "upsert": upsert,
                "read": read,
                "bytes": _size(path),
            }

        variants = {
            "parquet": parquet,
            "lakewarden": ours,
            "lakewarden_mor": ours_mor,
            "delta": delta,
        }
        if only:  # a subset (``bench_spark_insert``)
            variants = {k: v for k, v in variants.items() if k in only}
        for name in variants:  # untimed warm-up: JIT, Python workers, codecs
            _warm_up(spark, df.limit(1000), root / f"warmup-{name}", name)

        def round_of(name: str) -> Callable[[int], dict[str, float]]:
            def run(i: int) -> dict[str, float]:
                figures = variants[name](root / f"{name}-{i}")
                report_round("spark4", name, i, figures)
                return figures

            return run

        runs = rotated_rounds(rounds, {name: round_of(name) for name in variants})
        for name, frame in (
            ("lakewarden", lambda: lakewarden.spark.read(spark, str(root / "lakewarden-0"))),
            (
                "lakewarden_mor",
                lambda: lakewarden.spark.read(spark, str(root / "lakewarden_mor-0")),
            ),
            ("delta", lambda: spark.read.format("delta").load(str(root / "delta-0"))),
        ):
            if name not in variants:
                continue
            count = frame().count()  # the upsert replaced rows, never added any
            assert count == rows, (name, count, rows)
        return {"rows": rows, "upsert_rows": upsert_rows, "runs": runs}
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


def report_round(side: str, variant: str, round_: int, figures: dict[str, float]) -> None:
    """One ``peers-round`` JSON line on stderr per finished variant-round (with the load
    average), so a run stopped before its last round still leaves what it measured."""
    line = {"side": side, "variant": variant, "round": round_, **figures}
    line["load1"] = os.getloadavg()[0]
    print("peers-round " + json.dumps(line), file=sys.stderr, flush=True)


def _warm_up(spark: Any, small: Any, path: Path, name: str) -> None:
    """Variant ``name``'s insert, upsert (lakewarden's) and read of ``small``, untimed."""
    import lakewarden.spark
    from lakewarden.api.table import Table

    if name == "parquet":
        small.write.partitionBy(PARTITION).parquet(str(path))
        spark.read.parquet(str(path)).count()
    elif name in ("lakewarden", "lakewarden_mor"):
        mor = name == "lakewarden_mor"
        Table.create(
            str(path),
            name="warmup",
            record_key="id",
            schema=SCHEMA,
            partition_by=[PARTITION],
            ordering_field="ts",
            table_type="merge_on_read" if mor else "copy_on_write",
        )
        if mor:
            lakewarden.spark.write(small, str(path), "insert")
        else:
            small.write.format("lakewarden").mode("append").save(str(path))
        lakewarden.spark.write(small, str(path), "upsert")
        lakewarden.spark.read(spark, str(path)).count()
    else:
        small.write.format("delta").partitionBy(PARTITION).save(str(path))
        spark.read.format("delta").load(str(path)).count()


def measure_hudi(rows: int, rounds: int) -> dict[str, Any]:
    """The Spark 3.5 side (``_peers_hudi.py`` in the Hudi virtualenv). Raises: RuntimeError,
    PeerSetupError."""
    where, projection = changed_rows(rows)
    spec = {
        "rows": rows,
        "rounds": rounds,
        "columns": COLUMNS,
        "changed_where": where,
        "changed_columns": projection,
        "partition": PARTITION,
        "jars": [str(j) for j in _peers_setup.hudi_jars()],
    }
    command = [str(_peers_setup.hudi_python()), str(HUDI_SCRIPT), "--spec", json.dumps(spec)]
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "SPARK_HOME")}
    return _run_side(command, "the Hudi side", env)


def spark4_in_child(rows: int, rounds: int, only: Iterable[str] = ()) -> dict[str, Any]:
    """In a child process: a Spark JVM started earlier in this one would lack the Delta jars.
    ``only``: these variants (default: all). Raises: RuntimeError."""
    command = [sys.executable, "-m", "benchmarks.bench_peers", "--child", str(rows), str(rounds)]
    command += ["--only", ",".join(only)]
    return _run_side(command, "the Spark 4 side", dict(os.environ))


def _run_side(command: list[str], side: str, env: dict[str, str]) -> dict[str, Any]:
    """Run one side's process and return the JSON of its last stdout line. Its stderr is
    echoed as it comes (each finished variant-round prints a ``peers-round`` line there, so a
    run stopped part-way still leaves its figures in the log) and its tail kept for the error.

    Raises: RuntimeError (the side failed or ran past ``TIMEOUT_S``)."""
    tail: collections.deque[str] = collections.deque(maxlen=60)
    with tempfile.TemporaryFile("w+") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.PIPE, text=True, env=env)
        assert process.stderr is not None
        timer = threading.Timer(TIMEOUT_S, process.kill)
        timer.start()
        try:
            for line in process.stderr:
                sys.stderr.write(line)
                sys.stderr.flush()
                tail.append(line)
            code = process.wait()
        finally:
            timer.cancel()
        out.seek(0)
        stdout = out.read()
    if code != 0:
        raise RuntimeError(f"{side} failed (exit {code}): {''.join(tail)[-3000:]}")
    numbers: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return numbers


def medians(runs: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    return {
        variant: {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        for variant, rounds in runs.items()
    }


def results(spark4: dict[str, Any], hudi: dict[str, Any]) -> list[Result]:
    """A row per peer and operation (ratio to its process's Parquet), then a row per operation
    and peer comparing lakewarden's ratio with the peer's."""
    sides = {"spark4": medians(spark4["runs"]), "spark35": medians(hudi["runs"])}
    peers = {
        "lakewarden": "spark4",
        "lakewarden_mor": "spark4",
        "delta": "spark4",
        "hudi": "spark35",
    }
    shape = f"{spark4['rows']:,} rows x 10 columns by {PARTITION}"
    details = {
        "upsert_rows": spark4["upsert_rows"],
        "bytes_after_upsert": {p: sides[s][p]["bytes"] for p, s in peers.items()},
        "parquet_bytes": {s: sides[s]["parquet"]["bytes"] for s in sides},
        "rounds": {"spark4": spark4["runs"], "spark35": hudi["runs"]},
    }
    found: list[Result] = []
    ratio: dict[tuple[str, str], float] = {}
    for operation in OPERATIONS:
        for peer, side in peers.items():
            value, base = sides[side][peer][operation], sides[side]["parquet"][operation]
            ratio[peer, operation] = value / base
            spark = "Spark 4.0" if side == "spark4" else "Spark 3.5"
            found.append(
                Result(
                    benchmark="peers",
                    metric=f"{operation} {peer}, {shape}",
                    unit="s",
                    value=value,
                    baseline=base,
                    baseline_label=f"plain Parquet on {spark} (insert/read: the same rows; "
                    "upsert: a bare write of the changed rows)",
                    details=details if not found else {},
                )
            )
    for operation in OPERATIONS:
        for ours in ("lakewarden", "lakewarden_mor"):
            for peer in ("delta", "hudi"):
                found.append(
                    Result(
                        benchmark="peers",
                        metric=f"{operation}: {_label(ours)}/Parquet vs {peer}/Parquet",
                        unit="x",
                        value=ratio[ours, operation],
                        baseline=ratio[peer, operation],
                        baseline_label="a peer's own ratio to its Parquet "
                        "(below 1: lakewarden ahead)",
                        goal=_goal(ours, operation, peer),
                    )
                )
    return found


def _label(ours: str) -> str:
    return "lakewarden MOR" if ours == "lakewarden_mor" else "lakewarden"


def _goal(ours: str, operation: str, peer: str) -> float | None:
    """The goals: ahead of both on insert and read (the copy-on-write table), and on upsert
    the merge-on-read table against both; the copy-on-write upsert's goal is against Hudi
    only."""
    if ours == "lakewarden_mor":
        return 1.0 if operation == "upsert" else None
    return 1.0 if operation != "upsert" or peer == "hudi" else None


@benchmark("peers", "insert/upsert/read: lakewarden, Delta Lake and Apache Hudi vs Parquet")
def bench_peers(ctx: BenchContext) -> Iterable[Result]:
    rows, rounds = ctx.scale(2_000_000, 200_000), ctx.scale(3, 1)
    return results(spark4_in_child(rows, rounds), measure_hudi(rows, rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows (default 2M)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--child", nargs=2, metavar=("ROWS", "ROUNDS"), help=argparse.SUPPRESS)
    parser.add_argument("--only", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        only = [v for v in args.only.split(",") if v]
        print(json.dumps(measure_spark4(int(args.child[0]), int(args.child[1]), only)))
        return
    spark4 = spark4_in_child(args.rows, args.rounds)
    for result in results(spark4, measure_hudi(args.rows, args.rounds)):
        print(json.dumps(result.as_json(), indent=2))


if __name__ == "__main__":
    main()
