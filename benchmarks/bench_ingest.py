"""Streaming ingestion from Kafka: ``lakewarden ingest``'s query against the same stream into
Spark's own Parquet sink and Delta Lake's streaming sink, in one run on the same topic.

Setup (untimed): a broker (``BenchContext``), timeline-lock, heartbeat-monitor and
job-committer processes under a topic prefix of this run (so every lakewarden commit takes the
real lease, beats to the real monitor and is committed by the service), a topic with 2
partitions holding N JSON order events (``lakewarden.demo.order_events``), one local Spark
session (``local[2]``) with the Kafka source's and Delta Lake 4.0's jars
(``_ingest_sinks.session``). ``lakewarden ingest`` first ingests a small topic once, untimed,
to make the table config the other sinks parse with; then every sink runs one full rotated
round that is not counted (JIT, Python workers, codecs). Without that round each sink's first
timed run was its slowest, its ``addBatch`` too (likely a JVM still compiling the Kafka read
and JSON parse every sink shares), and with five sinks in three rounds the rotation cannot put
every sink equally often early: the order biased the ratios.

Timed runs, in rotated rounds (``_rounds.rotation``: each sink goes first in turn), each from a
fresh checkpoint with the ``available-now`` trigger and ``maxOffsetsPerTrigger`` = N/10, so
every run is the same 10 micro-batches of the same records through the same parse
(``parse_records`` + ``route_bad_records(..., "fail")``); figures are medians over rounds:

- **throughput**: N / wall seconds from building the query's stream (``IngestJob.start``
  builds it; the other sinks' runs build the same ``parse_records`` stream in their clock too)
  to the query's end (records/s), against
  the Parquet sink and against Delta's sink (partitioned by ``region`` like the table); the
  same for ``writeStream.format("lakewarden")`` into the same kind of table (its tasks open
  each batch's instant), and, as a diagnostic, ``lakewarden ingest`` with ``writer="spark"``
  (Spark's own Parquet writer instead of the default's Python tasks);
- **micro-batch latency** p50/p99: Spark's ``triggerExecution`` per batch;
- **batch commit latency** p50/p99, the driver's commit after the tasks: for lakewarden the
  wall time between the batch instant's ``inflight`` and ``completed`` entries (job commit of
  the accepted attempts + the conflict-checked ``completed`` append under timeline-lock's
  lease); for the Parquet and Delta sinks the time between the newest data file of the batch
  and its commit file (``_spark_metadata/<batch>``, ``_delta_log/<version>.json``).

The end-to-end latency (``_ingest_latency``) runs every sink (``lakewarden ingest``,
``writeStream.format("lakewarden")``, Parquet's, Delta's) at 1k and 10k events/s, also in
rotated rounds. The details add lakewarden with ``--bad-records skip`` (a ``mapInArrow`` hop
through a Python worker for every row) and per-batch numbers: for every sink Spark's
``addBatch`` (the sink's write job and commit; the rest of a batch is planning and offset logs
that every sink shares) and each run's time outside its batches (building and starting the
query, seeing it end). The measurement runs in a child
process: a Spark JVM started earlier by another benchmark would lack the Kafka and Delta jars
on its driver class path.

Run with ``python -m benchmarks ingest [--quick] [--events RECORDS]`` (results into
``benchmarks/results/``), or alone with ``python -m benchmarks.bench_ingest [--quick]
[--rounds N] [--records N] [--job-commits service|embedded]`` (printed only).
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
FORMAT = "lakewarden_format"  # writeStream.format("lakewarden"), beside ``lakewarden ingest``
SPARK_WRITER = "lakewarden_spark_writer"  # ``lakewarden ingest`` with writer="spark"
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


def _commit_ms(uri: str) -> list[float]:
    """Per completed instant: ``inflight`` -> ``completed`` wall time (ms)."""
    return [
        float(marks["completed"] - marks["inflight"])
        for marks in transitions(uri).values()
        if {"inflight", "completed"} <= set(marks)
    ]


def _lakewarden_run(
    spark: Any,
    settings: Settings,
    topic: str,
    root: Path,
    per_batch: int,
    policy: str,
    writer: str = "auto",
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
        writer=writer,  # type: ignore[arg-type]
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
        "add_batch_ms": [float(r.add_batch_ms) for r in totals.reports],
        "commit_ms": _commit_ms(str(table)),
    }


def _file_sink_run(
    spark: Any, sink: str, bootstrap: str, topic: str, root: Path, per_batch: int, config: Any
) -> dict[str, Any]:
    """The topic into Spark's ``parquet`` or Delta's ``delta`` sink, available-now."""
    from benchmarks._ingest_sinks import commit_ms, parsed_stream, start_sink

    name = f"{sink}-{uuid.uuid4().hex[:6]}"
    out = root / name
    started = time.perf_counter()  # building the stream counts, as in IngestJob.start
    good = parsed_stream(spark, bootstrap, topic, config, root / f"{name}-bad", per_batch)
    query = start_sink(good, sink, out, root / f"{name}-checkpoint", {"availableNow": True})
    return {**_until_done(query, started), "commit_ms": commit_ms(out, sink)}


def _format_sink_run(
    spark: Any, settings: Settings, bootstrap: str, topic: str, root: Path, per_batch: int
) -> dict[str, Any]:
    """The topic into ``writeStream.format("lakewarden")``, available-now: the table
    ``lakewarden ingest`` writes (``demo.create_table``), the same settings (its services),
    Spark's Python data source writing the rows in its Python workers."""
    from benchmarks._ingest_sinks import parsed_stream, start_format_sink
    from lakewarden.api.table import Table
    from lakewarden.demo import create_table

    name = f"lw-format-{uuid.uuid4().hex[:6]}"
    table = root / name
    create_table(table)
    config = Table.open(str(table)).config
    checkpoint = root / f"{name}-checkpoint"
    started = time.perf_counter()  # building the stream counts, as in IngestJob.start
    good = parsed_stream(spark, bootstrap, topic, config, root / f"{name}-bad", per_batch)
    query = start_format_sink(good, table, checkpoint, settings, {"availableNow": True})
    return {**_until_done(query, started), "commit_ms": _commit_ms(str(table))}


def _until_done(query: Any, started: float) -> dict[str, Any]:
    """Wait for an available-now ``query`` started at ``started`` (``perf_counter``): its wall
    seconds, the records it read and Spark's ``triggerExecution`` and ``addBatch`` of each
    batch with rows."""
    query.awaitTermination()
    wall = time.perf_counter() - started
    progress = [p for p in query.recentProgress if p.numInputRows > 0]
    return {
        "wall_s": wall,
        "records": sum(int(p.numInputRows) for p in progress),
        "batch_ms": [float(p.durationMs.get("triggerExecution", 0)) for p in progress],
        "add_batch_ms": [float(p.durationMs.get("addBatch", 0)) for p in progress],
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


def measure(
    records: int, bootstrap: str, latency_s: float, rounds: int, job_commits: str = "service"
) -> dict[str, Any]:
    """Everything of the module docstring; numbers in seconds and milliseconds, each sink's
    runs in round order. ``job_commits``: who runs lakewarden's job commits (the setting's
    default, ``service``: job-committer; ``embedded``: the driver). With
    ``LAKEWARDEN_BENCH_PROFILE_DIR`` set, the driver's batch calls are profiled into it."""
    profiled = os.environ.get(PROFILE_ENV)
    save_profile = _profile_driver(Path(profiled)) if profiled else None
    from benchmarks._ingest_latency import SINKS, measure_latency
    from benchmarks._ingest_sinks import session
    from benchmarks._rounds import rotated_rounds
    from lakewarden.api.table import Table
    from lakewarden.demo import create_topic, order_events, produce

    root = Path(tempfile.mkdtemp(prefix="lakewarden-bench-ingest-"))
    prefix = f"bench-ingest-{uuid.uuid4().hex[:8]}."
    settings = Settings(
        kafka=KafkaSettings(
            bootstrap_servers=bootstrap,
            topic_prefix=prefix,
            job_commits=job_commits,  # type: ignore[arg-type]
        ),
        state_dir=root / "state",
    )
    topic, warmup = f"{prefix}orders", f"{prefix}warmup"
    per_batch = records // BATCHES
    try:
        with _services(settings, root / "services"):
            for name, count in ((topic, records), (warmup, 2_000)):
                create_topic(bootstrap, name, PARTITIONS)
                produce(bootstrap, name, order_events(count, malformed=False))
            spark = session(root / "spark")
            try:
                # The table config the file sinks parse with; the JIT and the Python workers
                # warm up in the uncounted round.
                warm = _lakewarden_run(spark, settings, warmup, root, 1_000, "fail")
                config = Table.open(warm["table"]).config

                def file_sink(sink: str) -> Callable[[int], dict[str, Any]]:
                    return lambda _: _file_sink_run(
                        spark, sink, bootstrap, topic, root, per_batch, config
                    )

                timed = {
                    "parquet": file_sink("parquet"),
                    "delta": file_sink("delta"),
                    "lakewarden": lambda _: _lakewarden_run(
                        spark, settings, topic, root, per_batch, "fail"
                    ),
                    FORMAT: lambda _: _format_sink_run(
                        spark, settings, bootstrap, topic, root, per_batch
                    ),
                    SPARK_WRITER: lambda _: _lakewarden_run(
                        spark, settings, topic, root, per_batch, "fail", "spark"
                    ),
                }
                rotated_rounds(1, timed)  # the uncounted round (module docstring)
                runs = rotated_rounds(rounds, timed)
                skip = _lakewarden_run(spark, settings, topic, root, per_batch, "skip")

                def latency_run(sink: str, rate: int) -> Callable[[int], dict[str, Any]]:
                    return lambda _: measure_latency(
                        spark, settings, root, sink, rate=rate, duration_s=latency_s
                    )

                latency = {
                    str(rate): rotated_rounds(
                        rounds, {sink: latency_run(sink, rate) for sink in SINKS}
                    )
                    for rate in LATENCY_RATES
                }
            finally:
                spark.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if save_profile is not None:
            save_profile()
    for run in [*(run for side in runs.values() for run in side), skip]:
        assert run["records"] == records, run
    return {
        "records": records,
        "per_batch": per_batch,
        "rounds": rounds,
        "job_commits": job_commits,
        "runs": runs,
        "lakewarden_skip": skip,
        "latency": latency,
    }


def _measure_in_child(
    records: int, bootstrap: str, latency_s: float, rounds: int, job_commits: str
) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.bench_ingest", "--child", str(records)]
    command += [bootstrap, str(latency_s), str(rounds), job_commits]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=3 * 3600, env={**os.environ}
    )
    if result.returncode != 0:
        raise RuntimeError(f"bench_ingest child failed: {result.stderr[-3000:]}")
    numbers: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return numbers


@benchmark("ingest", "Kafka -> table streaming ingestion vs the same stream into Parquet and Delta")
def bench_ingest(
    ctx: BenchContext,
    rounds: int | None = None,
    records: int | None = None,
    job_commits: str = "service",
) -> Iterable[Result]:
    bootstrap = ctx.kafka_settings().kafka.bootstrap_servers
    assert bootstrap is not None
    rounds = rounds if rounds is not None else ctx.scale(3, 1)
    records = records or ctx.events or ctx.scale(200_000, 20_000)
    latency_s = ctx.scale(20, 5)
    return results(_measure_in_child(records, bootstrap, latency_s, rounds, job_commits))


def _rate(run: dict[str, Any]) -> float:
    return float(run["records"] / run["wall_s"])


def _median_of(runs: list[dict[str, Any]], pick: Callable[[dict[str, Any]], float]) -> float:
    return float(statistics.median(pick(run) for run in runs))


def _pct_median(runs: list[dict[str, Any]], key: str, q: float) -> float:
    """The median over ``runs`` of each run's ``q`` percentile of ``run[key]``."""
    return float(statistics.median(_percentile(run[key], q) for run in runs))


def results(numbers: dict[str, Any]) -> list[Result]:
    runs, skip = numbers["runs"], numbers["lakewarden_skip"]
    ours, parquet, delta = runs["lakewarden"], runs["parquet"], runs["delta"]
    shape = f"{numbers['records']:,} JSON records in {BATCHES} micro-batches"
    route = "" if numbers["job_commits"] == "service" else f", job commits {numbers['job_commits']}"
    shape += route  # not the default route: figures of their own
    rounds = f"median of {numbers['rounds']} rotated rounds"
    details = {
        "per_batch_records": numbers["per_batch"],
        "rounds": numbers["rounds"],
        "records_per_s": {sink: [round(_rate(r)) for r in runs[sink]] for sink in runs},
        "lakewarden_batch_ms": [r["batch_ms"] for r in ours],
        "lakewarden_commit_ms": [r["commit_ms"] for r in ours],
        "parquet_batch_ms": [r["batch_ms"] for r in parquet],
        "delta_batch_ms": [r["batch_ms"] for r in delta],
        "lakewarden_batch_breakdown_p50_ms": [r["breakdown_p50_ms"] for r in ours],
        "lakewarden_one_task_batches": [r["one_task_batches"] for r in ours],
        "lakewarden_columns_reused_batches": [r["columns_reused_batches"] for r in ours],
        "lakewarden_skip_records_per_s": _rate(skip),
        "lakewarden_skip_batch_p50_ms": statistics.median(skip["batch_ms"]),
        "batch_p50_ms": {
            sink: [statistics.median(r["batch_ms"]) for r in side] for sink, side in runs.items()
        },
        # The sink's own share of a batch (Spark's addBatch: the write job and the commit; the
        # rest of a batch is the same planning and offset logs for every sink) ...
        "add_batch_p50_ms": {
            sink: [statistics.median(r["add_batch_ms"]) for r in side]
            for sink, side in runs.items()
        },
        # ... and of a run, the time outside its batches: building and starting the query,
        # and seeing that it ended.
        "outside_batches_s": {
            sink: [round(r["wall_s"] - sum(r["batch_ms"]) / 1000, 3) for r in side]
            for sink, side in runs.items()
        },
        "spark_writer_batch_breakdown_p50_ms": [r["breakdown_p50_ms"] for r in runs[SPARK_WRITER]],
    }
    found = [
        Result(
            benchmark="ingest",
            metric=f"throughput vs the Parquet sink, {shape}",
            unit="records/s",
            value=_median_of(ours, _rate),
            baseline=_median_of(parquet, _rate),
            baseline_label=f"the same stream into writeStream.format('parquet'); {rounds}",
            lower_is_better=False,
            goal=0.9,
            details=details,
        ),
        Result(
            benchmark="ingest",
            metric=f"throughput vs Delta's sink, {shape}",
            unit="records/s",
            value=_median_of(ours, _rate),
            baseline=_median_of(delta, _rate),
            baseline_label="the same stream into writeStream.format('delta') (Delta 4.0.1, "
            f"partitioned by region like the table); {rounds}",
            lower_is_better=False,
            goal=1.0,
        ),
    ]
    found.extend(_other_writers(runs, shape, rounds))
    for q in (0.5, 0.99):
        label = f"p{round(q * 100)}"
        found.append(
            Result(
                benchmark="ingest",
                metric=f"micro-batch latency {label}, {shape}",
                unit="ms",
                value=_pct_median(ours, "batch_ms", q),
                baseline=_pct_median(delta, "batch_ms", q),
                baseline_label=f"Delta sink micro-batch (triggerExecution); {rounds}",
                details={"parquet_ms": _pct_median(parquet, "batch_ms", q)},
            )
        )
        found.append(
            Result(
                benchmark="ingest",
                metric=f"batch commit latency {label} (inflight -> completed){route}",
                unit="ms",
                value=_pct_median(ours, "commit_ms", q),
                baseline=_pct_median(delta, "commit_ms", q),
                baseline_label="Delta sink commit (last data file -> _delta_log entry); " + rounds,
                details={"parquet_ms": _pct_median(parquet, "commit_ms", q)},
            )
        )
    found.extend(_latency_results(numbers["latency"], rounds, numbers["job_commits"]))
    return found


def _other_writers(runs: dict[str, Any], shape: str, rounds: str) -> list[Result]:
    """``writeStream.format("lakewarden")`` against both sinks, and ``lakewarden ingest`` with
    Spark's Parquet writer (``writer="spark"``, a diagnostic) against the Parquet sink."""
    rate = {sink: _median_of(side, _rate) for sink, side in runs.items()}

    def throughput(what: str, side: str, sink: str, goal: float | None) -> Result:
        return Result(
            benchmark="ingest",
            metric=f"{what} throughput vs {SINK_NAMES[sink]}, {shape}",
            unit="records/s",
            value=rate[side],
            baseline=rate[sink],
            baseline_label=f"the same stream into writeStream.format('{sink}'); {rounds}",
            lower_is_better=False,
            goal=goal,
            details={"default_writer_records_per_s": rate["lakewarden"]},
        )

    form = "writeStream.format('lakewarden')"
    spark_writer = "lakewarden ingest with writer='spark' (Spark's Parquet writer, a diagnostic)"
    return [
        throughput(form, FORMAT, "delta", 1.0),
        throughput(form, FORMAT, "parquet", 0.9),
        throughput(spark_writer, SPARK_WRITER, "parquet", None),
    ]


SINK_NAMES = {"delta": "Delta's sink", "parquet": "the Parquet sink"}


def _latency_results(latency: dict[str, Any], rounds: str, job_commits: str) -> list[Result]:
    found = []
    route = "" if job_commits == "service" else f", job commits {job_commits}"
    ours = (("", "lakewarden"), ("writeStream.format('lakewarden') ", FORMAT))
    for rate, sides in latency.items():
        for pct in ("p50", "p99"):
            medians = {
                sink: _median_of(side, lambda r, key=f"{pct}_ms": float(r[key]))
                for sink, side in sides.items()
            }
            for what, sink in ours:
                found.append(
                    Result(
                        benchmark="ingest",
                        metric=f"{what}end-to-end latency {pct} at {int(rate):,} events/s "
                        f"(produced -> visible){route}",
                        unit="ms",
                        value=medians[sink],
                        baseline=medians["delta"],
                        baseline_label="the same stream into Delta's sink (produced -> its "
                        f"_delta_log version); trigger 0 s for every sink; {rounds}",
                        goal=1.0,
                        details={"parquet_ms": medians["parquet"], "runs": sides}
                        if pct == "p50" and sink == "lakewarden"
                        else {"parquet_ms": medians["parquet"]},
                    )
                )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20k records, one round")
    parser.add_argument("--rounds", type=int, default=None, help="rotated rounds (3; quick 1)")
    parser.add_argument("--records", type=int, default=None, help="records (200k; quick 20k)")
    parser.add_argument(
        "--job-commits",
        choices=("service", "embedded"),
        default="service",
        help="who runs lakewarden's job commits (KafkaSettings.job_commits)",
    )
    parser.add_argument(
        "--child",
        nargs=5,
        metavar=("RECORDS", "BOOTSTRAP", "LATENCY_S", "ROUNDS", "JOB_COMMITS"),
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args()
    if args.child:
        records, bootstrap, latency_s, rounds, job_commits = args.child
        numbers = measure(int(records), bootstrap, float(latency_s), int(rounds), job_commits)
        print(json.dumps(numbers))
        return
    ctx = BenchContext(quick=args.quick)
    try:
        for result in bench_ingest(ctx, args.rounds, args.records, args.job_commits):
            print(json.dumps(result.as_json(), indent=2))
    finally:
        ctx.close()


if __name__ == "__main__":
    main()
