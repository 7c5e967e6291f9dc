"""Streaming ingestion from Kafka: ``lakewarden ingest``'s query against the same stream into
Spark's own Parquet sink, in one run on the same topic.

Setup (untimed): a broker (``BenchContext``), timeline-lock and heartbeat-monitor processes
under a topic prefix of this run (so every lakewarden commit takes the real lease and beats to
the real monitor), a topic with 2 partitions holding N JSON order events
(``lakewarden.demo.order_events``), one local Spark session (``local[2]``) with the Kafka source
jars. Each sink first ingests a small topic once (JIT, Python workers, codecs), untimed.

Timed runs, interleaved (Parquet, then lakewarden), each from a fresh checkpoint with the
``available-now`` trigger and ``maxOffsetsPerTrigger`` = N/10, so every run is the same 10
micro-batches of the same records through the same parse (``parse_records`` +
``route_bad_records(..., "fail")``):

- **throughput**: N / wall seconds from ``start()`` to the query's end (records/s);
- **micro-batch latency** p50/p99: Spark's ``triggerExecution`` per batch;
- **batch commit latency** p50/p99, the driver's commit after the tasks (lakewarden's query
  writes each batch in ``foreachBatch``: the driver opens the instant, Spark's Parquet writer
  writes the rows, ``_micro_batch``): for lakewarden the
  wall time between the batch instant's ``inflight`` and ``completed`` entries (job commit of
  the accepted attempts + the conflict-checked ``completed`` append under timeline-lock's
  lease); for Parquet the time between the newest data file of the batch and its
  ``_spark_metadata`` log entry (``ManifestFileCommitProtocol.commitJob``).

The details add lakewarden with ``--bad-records skip`` (a ``mapInArrow`` hop through a Python
worker for every row) and per-batch numbers. The measurement runs in a child process: a Spark
JVM started earlier by another benchmark would lack the Kafka jars on its driver class path.

Run alone with ``python -m benchmarks.bench_ingest [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks._ingest_breakdown import breakdown, p50s, transitions
from benchmarks._registry import BenchContext, Result, benchmark
from lakewarden.settings import KafkaSettings, Settings

BATCHES = 10
# With Kafka configured the driver hands every batch's job commit to job-committer.
JOB_COMMITTER = "lakewarden_services.job_committer"
LATENCY_RATES = (1_000, 10_000)  # events/s of the end-to-end latency runs
PARTITIONS = 2
PROFILE_ENV = "LAKEWARDEN_BENCH_PROFILE_DIR"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    index = min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))
    return ordered[index]


@contextmanager
def _services(settings: Settings, home: Path) -> Iterator[None]:
    from lakewarden.events import ensure_topics
    from lakewarden_services._common.process import ServiceProcess

    ensure_topics(settings)
    started = []
    try:
        for module in (
            "lakewarden_services.timeline_lock",
            "lakewarden_services.heartbeat_monitor",
            JOB_COMMITTER,
        ):
            service = ServiceProcess(module, settings, home=home / module.rsplit(".", 1)[-1])
            service.home.mkdir(parents=True)
            started.append(service)
            service.start()
        yield
    finally:
        for service in reversed(started):
            service.stop()


def _parquet_commit_ms(out: Path, batch: int) -> float:
    """``_spark_metadata/<batch>``'s mtime minus the newest data file it lists (ms). Every
    10th entry is a compaction (``<batch>.compact``) listing every batch's files so far; its
    newest file is still this batch's."""
    log = out / "_spark_metadata" / str(batch)
    if not log.exists():
        log = log.with_name(f"{batch}.compact")
    lines = [json.loads(line) for line in log.read_text().splitlines()[1:] if line.strip()]
    newest = max(int(entry["modificationTime"]) for entry in lines)
    return log.stat().st_mtime * 1000 - newest


def _commit_ms(uri: str) -> list[float]:
    """Per completed instant: ``inflight`` -> ``completed`` wall time (ms)."""
    return [
        float(marks["completed"] - marks["inflight"])
        for marks in transitions(uri).values()
        if {"inflight", "completed"} <= set(marks)
    ]


def _lakewarden_run(
    spark: Any, settings: Settings, topic: str, root: Path, per_batch: int, policy: str
) -> dict[str, Any]:
    from lakewarden.demo import create_table
    from lakewarden.spark.ingest import IngestJob, IngestSpec

    name = f"lw-{uuid.uuid4().hex[:6]}"
    table = root / name
    create_table(table)
    assert settings.kafka.bootstrap_servers is not None
    spec = IngestSpec(
        topic=topic,
        table=str(table),
        bootstrap=settings.kafka.bootstrap_servers,
        checkpoint=root / f"{name}-checkpoint",
        trigger_s=None,
        max_records_per_batch=per_batch,
        bad_records="skip" if policy == "skip" else "fail",
        settings=settings,
    )
    started = time.perf_counter()
    job = IngestJob.start(spark, spec)
    totals = job.run(poll_s=0.2)
    wall = time.perf_counter() - started
    assert job.writer is not None
    outcomes = list(job.writer.outcomes)
    parts = breakdown(totals.reports, outcomes, str(table))
    return {
        "breakdown_p50_ms": p50s(parts),
        # batches written by one task, and with the query's kept column expressions
        "one_task_batches": sum(o.one_task for o in outcomes),
        "columns_reused_batches": sum(o.columns_reused for o in outcomes),
        "table": str(table),
        "wall_s": wall,
        "records": totals.input_rows,
        "batch_ms": [float(r.duration_ms) for r in totals.reports],
        "commit_ms": _commit_ms(str(table)),
    }


def _parquet_run(
    spark: Any, bootstrap: str, topic: str, root: Path, per_batch: int, config: Any
) -> dict[str, Any]:
    from lakewarden.spark._arrow import spark_schema
    from lakewarden.spark.ingest import parse_records, route_bad_records

    name = f"pq-{uuid.uuid4().hex[:6]}"
    out = root / name
    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_batch))
        .load()
    )
    names = spark_schema(config.pa_schema).fieldNames()
    good = route_bad_records(parse_records(raw, config), "fail", root / f"{name}-bad", names)
    started = time.perf_counter()
    query = (
        good.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(root / f"{name}-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    wall = time.perf_counter() - started
    progress = [p for p in query.recentProgress if p.numInputRows > 0]
    return {
        "wall_s": wall,
        "records": sum(int(p.numInputRows) for p in progress),
        "batch_ms": [float(p.durationMs.get("triggerExecution", 0)) for p in progress],
        "commit_ms": [_parquet_commit_ms(out, int(p.batchId)) for p in progress],
    }


def _profile_driver(folder: Path) -> Callable[[], None]:
    """Profile every ``MicroBatchWriter`` call (the driver's part of each batch: Spark calls
    it from a Py4J callback thread, which a profiler started elsewhere would not see); the
    returned function writes ``ingest-driver.prof`` and the top of it by cumulative time
    (``ingest-driver.txt``) into ``folder``."""
    import cProfile
    import io
    import pstats

    from lakewarden.spark._micro_batch import MicroBatchWriter

    profile = cProfile.Profile()
    original = MicroBatchWriter.__call__

    def call(self: MicroBatchWriter, df: Any, batch_id: int) -> None:
        profile.enable()
        try:
            original(self, df, batch_id)
        finally:
            profile.disable()

    MicroBatchWriter.__call__ = call  # type: ignore[method-assign]

    def save() -> None:
        folder.mkdir(parents=True, exist_ok=True)
        profile.dump_stats(str(folder / "ingest-driver.prof"))
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(40)
        (folder / "ingest-driver.txt").write_text(text.getvalue())

    return save


def measure(records: int, bootstrap: str, latency_s: float) -> dict[str, Any]:
    """Everything of the module docstring; numbers in seconds and milliseconds. With
    ``LAKEWARDEN_BENCH_PROFILE_DIR`` set, the driver's batch calls are profiled into it."""
    profiled = os.environ.get(PROFILE_ENV)
    save_profile = _profile_driver(Path(profiled)) if profiled else None
    from benchmarks._ingest_latency import measure_latency
    from lakewarden.api.table import Table
    from lakewarden.demo import create_topic, order_events, produce
    from lakewarden.spark.ingest import ingest_session

    root = Path(tempfile.mkdtemp(prefix="lakewarden-bench-ingest-"))
    prefix = f"bench-ingest-{uuid.uuid4().hex[:8]}."
    settings = Settings(
        kafka=KafkaSettings(bootstrap_servers=bootstrap, topic_prefix=prefix),
        state_dir=root / "state",
    )
    topic, warmup = f"{prefix}orders", f"{prefix}warmup"
    per_batch = records // BATCHES
    try:
        with _services(settings, root / "services"):
            for name, count in ((topic, records), (warmup, 2_000)):
                create_topic(bootstrap, name, PARTITIONS)
                produce(bootstrap, name, order_events(count, malformed=False))
            spark = ingest_session(master="local[2]", local_dir=root / "spark")
            try:
                warm = _lakewarden_run(spark, settings, warmup, root, 1_000, "fail")
                config = Table.open(warm["table"]).config
                _parquet_run(spark, bootstrap, warmup, root, 1_000, config)
                parquet = _parquet_run(spark, bootstrap, topic, root, per_batch, config)
                ours = _lakewarden_run(spark, settings, topic, root, per_batch, "fail")
                skip = _lakewarden_run(spark, settings, topic, root, per_batch, "skip")
                latency = {
                    str(rate): measure_latency(
                        spark, settings, root, rate=rate, duration_s=latency_s
                    )
                    for rate in LATENCY_RATES
                }
            finally:
                spark.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if save_profile is not None:
            save_profile()
    for run in (parquet, ours, skip):
        assert run["records"] == records, run
    return {
        "records": records,
        "per_batch": per_batch,
        "parquet": parquet,
        "lakewarden": ours,
        "lakewarden_skip": skip,
        "latency": latency,
    }


def _measure_in_child(records: int, bootstrap: str, latency_s: float) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.bench_ingest", "--child", str(records)]
    command += [bootstrap, str(latency_s)]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=3600, env={**os.environ}
    )
    if result.returncode != 0:
        raise RuntimeError(f"bench_ingest child failed: {result.stderr[-3000:]}")
    numbers: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return numbers


@benchmark("ingest", "Kafka -> table streaming ingestion vs the same stream into Spark's Parquet")
def bench_ingest(ctx: BenchContext) -> Iterable[Result]:
    bootstrap = ctx.kafka_settings().kafka.bootstrap_servers
    assert bootstrap is not None
    numbers = _measure_in_child(ctx.scale(200_000, 20_000), bootstrap, ctx.scale(20, 5))
    return results(numbers)


def results(numbers: dict[str, Any]) -> list[Result]:
    ours, base, skip = numbers["lakewarden"], numbers["parquet"], numbers["lakewarden_skip"]
    shape = f"{numbers['records']:,} JSON records in {BATCHES} micro-batches"
    details = {
        "per_batch_records": numbers["per_batch"],
        "lakewarden_batch_ms": ours["batch_ms"],
        "lakewarden_commit_ms": ours["commit_ms"],
        "parquet_batch_ms": base["batch_ms"],
        "parquet_commit_ms": base["commit_ms"],
        "lakewarden_batch_breakdown_p50_ms": ours["breakdown_p50_ms"],
        "lakewarden_one_task_batches": ours["one_task_batches"],
        "lakewarden_columns_reused_batches": ours["columns_reused_batches"],
        "lakewarden_wall_s": ours["wall_s"],
        "parquet_wall_s": base["wall_s"],
        "lakewarden_skip_records_per_s": skip["records"] / skip["wall_s"],
        "lakewarden_skip_batch_p50_ms": statistics.median(skip["batch_ms"]),
    }
    found = [
        Result(
            benchmark="ingest",
            metric=f"throughput, {shape}",
            unit="records/s",
            value=ours["records"] / ours["wall_s"],
            baseline=base["records"] / base["wall_s"],
            baseline_label="the same stream into writeStream.format('parquet')",
            lower_is_better=False,
            details=details,
        )
    ]
    for q in (0.5, 0.99):
        label = f"p{round(q * 100)}"
        found.append(
            Result(
                benchmark="ingest",
                metric=f"micro-batch latency {label}, {shape}",
                unit="ms",
                value=_percentile(ours["batch_ms"], q),
                baseline=_percentile(base["batch_ms"], q),
                baseline_label="Parquet sink micro-batch (triggerExecution)",
            )
        )
        found.append(
            Result(
                benchmark="ingest",
                metric=f"batch commit latency {label} (inflight -> completed)",
                unit="ms",
                value=_percentile(ours["commit_ms"], q),
                baseline=_percentile(base["commit_ms"], q),
                baseline_label="Parquet sink commit (last data file -> _spark_metadata entry)",
            )
        )
    for rate, sides in numbers["latency"].items():
        ours_l, base_l = sides["lakewarden"], sides["parquet"]
        for pct in ("p50", "p99"):
            found.append(
                Result(
                    benchmark="ingest",
                    metric=f"end-to-end latency {pct} at {int(rate):,} events/s "
                    "(produced -> readable)",
                    unit="ms",
                    value=ours_l[f"{pct}_ms"],
                    baseline=base_l[f"{pct}_ms"],
                    baseline_label="the same stream into the Parquet sink (produced -> "
                    "its batch in _spark_metadata); trigger 0 s for both",
                    details={"lakewarden": ours_l, "parquet": base_l} if pct == "p50" else {},
                )
            )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20k records")
    parser.add_argument(
        "--child", nargs=3, metavar=("RECORDS", "BOOTSTRAP", "LATENCY_S"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        records, bootstrap, latency_s = args.child
        print(json.dumps(measure(int(records), bootstrap, float(latency_s))))
        return
    ctx = BenchContext(quick=args.quick)
    try:
        for result in bench_ingest(ctx):
            print(json.dumps(result.as_json(), indent=2))
    finally:
        ctx.close()


if __name__ == "__main__":
    main()
