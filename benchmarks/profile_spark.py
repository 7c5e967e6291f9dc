"""Profile one Spark write: where its time goes in the driver, the Python workers and the JVM.

    python -m benchmarks.profile_spark \
        insert|bulk_insert|upsert|upsert_mor|parquet|upsert_parquet|error_table
        [--rows N] [--out DIR] [--rate HZ] [--native]

Not a benchmark (nothing is compared, nothing is registered): a tool that says what dominates
a write that ``bench_spark`` or ``bench_error_table`` found slow. One local SparkSession as
``bench_spark``'s (``local[2]``), the same cached input (``COLUMNS``), an untimed warm-up of
the same write, then the profiled write with three views at once:

- **driver**: ``cProfile`` around the call in this process (PySpark's py4j side; for
  ``bulk_insert`` through Spark's writer also the adoption of the files and the commit);
- **Python workers**: ``py-spy record --subprocesses`` of this process tree (the dev-dev
  dependency ``py-spy``), sampling the active threads only, so samples / rate ~ CPU seconds;
  summarised per process kind: the Python Data Source planner and writer workers
  (``pyspark.daemon``), this driver, the rest; the top functions by self and by inclusive
  samples;
- **JVM**: Spark's event log (``spark.eventLog.enabled`` into a temporary directory): each
  stage of the profiled write with its wall time, its tasks' executor run time, CPU time and
  GC time summed.

The text report is printed and written to ``--out`` (default ``benchmarks/results/``) as
``profile-<write>-<rows>.txt``, with py-spy's raw samples beside it (``.pyspy.txt``, for a
flame graph).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks._report import RESULTS_DIR
from benchmarks.bench_spark import _new_table, _session, cached_input, mor_table

WRITES = (
    "insert",
    "bulk_insert",
    "upsert",
    "upsert_mor",
    "parquet",
    "upsert_parquet",
    "error_table",
)
TOP = 25


@contextlib.contextmanager
def sampled(out: Path, rate: int, native: bool) -> Iterator[None]:
    """py-spy samples of this process and every descendant while the block runs.

    Raises: RuntimeError (py-spy is not installed or cannot attach)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        raise RuntimeError("py-spy is not installed (pip install py-spy==0.4.3, a dev extra)")
    command = [spy, "record", "--subprocesses", "--nonblocking", "--format", "raw"]
    command += ["--rate", str(rate), "-o", str(out), "--pid", str(os.getpid())]
    if native:
        command.append("--native")
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # py-spy attaches; the first samples must not miss the write's start
    if proc.poll() is not None:
        said = proc.stderr.read().decode() if proc.stderr is not None else ""
        raise RuntimeError(f"py-spy could not attach: {said[-400:]}")
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        proc.wait(timeout=120)


def summarise_samples(raw: Path, rate: int, driver_pid: int) -> str:
    """The top functions of each process kind by self and by inclusive samples."""
    kinds: dict[str, tuple[Counter[str], Counter[str], list[int]]] = {}
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        # With --subprocesses a stack starts with the process and its ancestors, each a
        # frame ``process <pid>:"<command line>"`` followed by that process's own frames.
        last = max(i for i, f in enumerate(frames) if f.startswith("process ") or i == 0)
        kind = _process_kind(frames[last], driver_pid)
        own, inclusive, total = kinds.setdefault(kind, (Counter(), Counter(), [0]))
        count = int(count_text)
        total[0] += count
        calls = frames[last + 1 :] or ["(no Python frame)"]
        own[_short(calls[-1])] += count
        for frame in {_short(f) for f in calls}:
            inclusive[frame] += count
    out = io.StringIO()
    for kind, (own, inclusive, total) in sorted(kinds.items(), key=lambda k: -k[1][2][0]):
        seconds = total[0] / rate
        out.write(f"\n== {kind}: {total[0]} samples ~ {seconds:.2f} CPU s\n")
        out.write("-- self (the function itself was on CPU):\n")
        for name, count in own.most_common(TOP):
            out.write(f"{count / rate:8.2f} s {100 * count / total[0]:5.1f}%  {name}\n")
        out.write("-- inclusive (on the stack):\n")
        for name, count in inclusive.most_common(TOP):
            out.write(f"{count / rate:8.2f} s {100 * count / total[0]:5.1f}%  {name}\n")
    return out.getvalue()


def _process_kind(root: str, driver_pid: int) -> str:
    # py-spy's root frame: process <pid>:"<command line>"
    pid_text, _, command = root.removeprefix("process ").partition(":")
    if pid_text.strip() == str(driver_pid):
        return "driver (this process)"
    if "pyspark.daemon" in command or "pyspark.worker" in command:
        module = command.strip('"').split()[-1]
        return f"PySpark Python workers ({module})"
    return f"other: {command.strip(chr(34))[:80]}"


def _short(frame: str) -> str:
    """``func (path/to/module.py:123)`` without the line number and the site-packages
    prefix, so a function's samples add up."""
    name, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    for marker in ("site-packages/", "/lakewarden/", "/benchmarks/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{name} ({path})" if path else name


def summarise_event_log(log_dir: Path, since_ms: int) -> str:
    """Each stage submitted after ``since_ms``: wall time, tasks, and their summed executor
    run, CPU and GC time (Spark's own accounting of the JVM side)."""
    stages: dict[int, dict[str, Any]] = {}
    tasks: dict[int, Counter[str]] = {}
    for path in sorted(p for p in log_dir.rglob("*") if p.is_file()):
        for line in path.read_text().splitlines():
            if not line.startswith("{"):
                continue
            event = json.loads(line)
            kind = event.get("Event")
            if kind == "SparkListenerStageCompleted":
                info = event["Stage Info"]
                if info.get("Submission Time", 0) >= since_ms:
                    stages[info["Stage ID"]] = info
            elif kind == "SparkListenerTaskEnd":
                metrics = event.get("Task Metrics") or {}
                sums = tasks.setdefault(event["Stage ID"], Counter())
                sums["tasks"] += 1
                sums["run_ms"] += metrics.get("Executor Run Time", 0)
                sums["cpu_ms"] += metrics.get("Executor CPU Time", 0) // 1_000_000
                sums["gc_ms"] += metrics.get("JVM GC Time", 0)
                sums["deserialize_ms"] += metrics.get("Executor Deserialize Time", 0)
                sums["shuffle_write_ms"] += (metrics.get("Shuffle Write Metrics") or {}).get(
                    "Shuffle Write Time", 0
                ) // 1_000_000
    out = io.StringIO()
    out.write("\n== JVM: stages of the profiled write (Spark event log)\n")
    out.write("stage  wall_s  tasks  run_s  cpu_s  gc_s  shuffle_write_s  name\n")
    for stage_id, info in sorted(stages.items()):
        wall = (info.get("Completion Time", 0) - info.get("Submission Time", 0)) / 1000
        sums = tasks.get(stage_id, Counter())
        name = info.get("Stage Name", "")[:70]
        out.write(
            f"{stage_id:5d} {wall:7.2f} {sums['tasks']:6d} {sums['run_ms'] / 1000:6.2f} "
            f"{sums['cpu_ms'] / 1000:6.2f} {sums['gc_ms'] / 1000:5.2f} "
            f"{sums['shuffle_write_ms'] / 1000:16.2f}  {name}\n"
        )
    return out.getvalue()


def driver_profile(profile: cProfile.Profile) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("cumulative").print_stats(TOP)
    out.write("\n-- by own time:\n")
    stats.sort_stats("tottime").print_stats(15)
    return "\n".join(line for line in out.getvalue().splitlines() if line.strip()) + "\n"


def _writes(spark: Any, df: Any, root: Path, rows: int) -> dict[str, Callable[[int], Any]]:
    """Each write by name: ``func(n)`` writes into a fresh location numbered ``n``."""
    import lakewarden.spark

    changed = df.where("id % 10 = 3").selectExpr(
        *[c if c != "ts" else "ts + 1 as ts" for c in df.columns]
    )
    shuffle = int(spark.conf.get("spark.sql.shuffle.partitions"))

    def insert(n: int) -> None:
        df.write.format("lakewarden").mode("append").save(_new_table(root, f"insert-{n}"))

    def bulk_insert(n: int) -> None:
        uri = _new_table(root, f"bulk-{n}")
        lakewarden.spark.write(df, uri, "bulk_insert", options={"writer": "spark"})

    def upsert(n: int) -> None:
        lakewarden.spark.write(changed, str(root / "upsert"), "upsert")

    def upsert_mor(n: int) -> None:
        # Each write appends one log block per file group: the warm-up's and the profiled
        # one's both extend the base files (the read side pays for pending blocks, not this).
        lakewarden.spark.write(changed, str(root / "upsert_mor"), "upsert")

    def parquet(n: int) -> None:
        df.write.parquet(str(root / f"parquet-{n}"))

    def upsert_parquet(n: int) -> None:
        changed.repartition(shuffle, "id").write.parquet(str(root / f"upsert-parquet-{n}"))

    return {
        "insert": insert,
        "bulk_insert": bulk_insert,
        "upsert": upsert,
        "upsert_mor": upsert_mor,
        "parquet": parquet,
        "upsert_parquet": upsert_parquet,
    }


def _prepare(name: str, spark: Any, df: Any, root: Path) -> None:
    """What the profiled write builds on (untimed): the table an upsert merges into, and a
    cached copy of the upsert's rows, as ``bench_spark`` has."""
    if name == "upsert":
        uri = _new_table(root, "upsert")
        df.write.format("lakewarden").mode("append").save(uri)
    if name == "upsert_mor":  # base files in the buckets' canonical file groups
        mor_table(df, root, "upsert_mor")


def profile(name: str, rows: int, out_dir: Path, rate: int, native: bool) -> str:
    """Run the warm-up and the profiled write; return the report."""
    import lakewarden.spark

    work = Path(tempfile.mkdtemp(prefix="lakewarden-profile-"))
    events = work / "events"
    events.mkdir()
    root = work / "tables"
    spark = _session(
        {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": events.as_uri(),
            "spark.eventLog.compress": "false",
            "spark.eventLog.rolling.enabled": "false",
        }
    )
    try:
        lakewarden.spark.register(spark)
        df = cached_input(spark, rows)
        if name == "error_table":
            return _profile_error_table(spark, rows, root, work, out_dir, rate, native)
        writes = _writes(spark, df, root, rows)
        _prepare(name, spark, df, root)
        writes[name](0)  # warm-up: workers, codecs, JIT, the Java UDFs
        raw = out_dir / f"profile-{name}-{rows}.pyspy.txt"
        driver = cProfile.Profile()
        since = int(time.time() * 1000)
        with sampled(raw, rate, native):
            start = time.perf_counter()
            driver.runcall(writes[name], 1)
            wall = time.perf_counter() - start
    finally:
        spark.stop()
    report = (
        f"profile of {name}, {rows:,} rows x 10 columns: wall {wall:.2f} s (under py-spy)\n"
        + summarise_event_log(events, since)
        + summarise_samples(raw, rate, os.getpid())
        + "\n== driver cProfile\n"
        + driver_profile(driver)
    )
    shutil.rmtree(work, ignore_errors=True)
    return report


def _profile_error_table(
    spark: Any, rows: int, root: Path, work: Path, out_dir: Path, rate: int, native: bool
) -> str:
    """The error table write of ``bench_error_table`` (1% bad rows, its dev stack)."""
    from benchmarks.bench_error_table import _columns, _stack, _wait_for_errors
    from benchmarks.bench_error_table import _new_table as new_table
    from lakewarden.errortable import error_table_location
    from lakewarden.settings import ErrorTableSettings
    from lakewarden.spark._options import encode_settings

    bad = spark.range(rows, numPartitions=4).selectExpr(*_columns(bad=True)).cache()
    bad.count()
    expected = sum(1 for i in range(rows) if i % 100 == 42)
    with _stack(work / "stack") as settings:
        on = encode_settings(
            settings.model_copy(update={"error_table": ErrorTableSettings(enabled=True)})
        )

        def write(n: int) -> str:
            uri = new_table(root, f"bad-{n}")
            bad.write.format("lakewarden").mode("append").option("lakewarden.settings", on).save(
                uri
            )
            return uri

        write(0)
        raw = out_dir / f"profile-error_table-{rows}.pyspy.txt"
        driver = cProfile.Profile()
        since = int(time.time() * 1000)
        with sampled(raw, rate, native):
            start = time.perf_counter()
            uri = driver.runcall(write, 1)
            wall = time.perf_counter() - start
        errors = error_table_location(uri, "bad-1", ErrorTableSettings()).uri
        lag = _wait_for_errors(errors, expected)
    spark.stop()
    events = work / "events"
    return (
        f"profile of the error table write, {rows:,} rows x 10 columns, {expected} bad: "
        f"wall {wall:.2f} s (under py-spy), sink lag {lag:.2f} s\n"
        + summarise_event_log(events, since)
        + summarise_samples(raw, rate, os.getpid())
        + "\n== driver cProfile\n"
        + driver_profile(driver)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("write", choices=WRITES)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    parser.add_argument("--native", action="store_true", help="py-spy --native (C frames)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report = profile(args.write, args.rows, args.out, args.rate, args.native)
    (args.out / f"profile-{args.write}-{args.rows}.txt").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
