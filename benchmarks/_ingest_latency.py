"""End-to-end latency of streaming ingestion: an event produced to Kafka -> its row visible.

Part of ``bench_ingest`` (runs in its child process, on its broker, services and Spark).
For each rate (events/s) and each sink, on a topic and table of their own:

1. start the query with a processing-time trigger of 0 (a micro-batch starts as soon as the
   previous one ended: the pipeline's own latency, no trigger interval added) and wait until
   its first, empty trigger ran: ``lakewarden ingest``'s query (``IngestJob``), or the same
   stream into ``writeStream.format("lakewarden")``, Spark's Parquet sink or Delta Lake's
   streaming sink (``_ingest_sinks``);
2. produce ``rate`` JSON order events a second for ``duration_s`` from a thread, paced every
   10 ms; each carries its produce time (epoch ms) in ``updated_at``;
3. wait until the query read every event (or ``timeout_s``), then stop it;
4. a row is *visible* when the file that commits its batch exists, the same method for every
   sink (``_ingest_sinks``): lakewarden's ``completed`` timeline entry, Delta's
   ``_delta_log/<version>.json``, the Parquet sink's ``_spark_metadata/<batch>``. Its latency
   is that file's mtime minus the event's produce time.

Reported: p50 / p99 / max over every event, the events and micro-batches seen, and the rate
actually achieved by the producer (under load it may fall short: then the figure says so).
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

PACE_S = 0.01


def _produce_at_rate(bootstrap: str, topic: str, rate: int, duration_s: float) -> dict[str, Any]:
    """Produce ``rate`` events/s for ``duration_s``; return counts and the achieved rate."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "acks": "all"})
    start = time.monotonic()
    sent = 0
    while (elapsed := time.monotonic() - start) < duration_s:
        due = min(int(elapsed * rate) + 1, int(duration_s * rate))
        while sent < due:
            now_ms = time.time_ns() // 1_000_000
            value = {
                "order_id": f"o-{sent:08d}",
                "region": ("eu", "us", "apac")[sent % 3],
                "customer": f"c-{sent % 1000:03d}",
                "amount": 1.0,
                "updated_at": now_ms,
            }
            try:
                producer.produce(topic, json.dumps(value).encode())
            except BufferError:
                producer.poll(0.01)
                continue
            sent += 1
        producer.poll(0)
        time.sleep(PACE_S)
    producer_s = time.monotonic() - start
    left = producer.flush(30)
    if left:
        raise RuntimeError(f"{left} latency events to {topic} were not delivered")
    return {"events": sent, "achieved_rate": sent / producer_s}


def _run_and_measure(start: Any, produce: Any, count_in: Any, timeout_s: float) -> dict[str, Any]:
    """Start the query, wait for its first trigger, produce, wait until it read every event,
    stop it; return what the producer reported."""
    query = start()
    try:
        _wait_for(lambda: query.lastProgress is not None, timeout_s, "first trigger")
        produced = produce()
        _wait_for(lambda: count_in(query) >= produced["events"], timeout_s, "complete ingest")
    finally:
        query.stop()
    return produced


def _summary(latencies: list[float], produced: dict[str, Any], batches: int) -> dict[str, Any]:
    if len(latencies) != produced["events"]:
        raise RuntimeError(f"{len(latencies)} of {produced['events']} events reached the table")
    ordered = sorted(latencies)
    return {
        "achieved_rate": produced["achieved_rate"],
        "events": produced["events"],
        "batches": batches,
        "p50_ms": ordered[len(ordered) // 2],
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "max_ms": ordered[-1],
    }


SINKS = ("parquet", "delta", "lakewarden", "lakewarden_format")
TRIGGER = {"processingTime": "0 seconds"}


def measure_latency(
    spark: Any,
    settings: Any,
    root: Path,
    sink: str,
    *,
    rate: int,
    duration_s: float,
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Steps 1-4 of the module docstring at ``rate`` events/s into ``sink`` (one of
    ``SINKS``), on a topic of its own."""
    if sink == "lakewarden":
        return _lakewarden_latency(spark, settings, root, rate, duration_s, timeout_s)
    if sink == "lakewarden_format":
        return _format_latency(spark, settings, root, rate, duration_s, timeout_s)
    return _file_sink_latency(spark, settings, root, sink, rate, duration_s, timeout_s)


def _topic(settings: Any, name: str) -> str:
    from lakewarden.demo import create_topic

    topic = f"{settings.kafka.topic_prefix}{name}"
    create_topic(settings.kafka.bootstrap_servers, topic, 2)
    return topic


def _file_sink_latency(
    spark: Any,
    settings: Any,
    root: Path,
    sink: str,
    rate: int,
    duration_s: float,
    timeout_s: float,
) -> dict[str, Any]:
    from benchmarks._ingest_sinks import file_latencies, start_sink
    from lakewarden.demo import ORDERS_SCHEMA
    from lakewarden.table.config import TableConfig

    out = root / f"latency-{sink}-{rate}-{uuid.uuid4().hex[:6]}"
    config = TableConfig.new(
        name="orders", record_key="order_id", schema=ORDERS_SCHEMA, partition_by=["region"]
    )
    produced = _parsed_into(
        spark,
        settings,
        (out, config),
        lambda good, checkpoint: start_sink(good, sink, out, checkpoint, TRIGGER),
        (rate, duration_s, timeout_s),
    )
    latencies, batches = file_latencies(out, sink)
    return _summary(latencies, produced, batches)


def _format_latency(
    spark: Any, settings: Any, root: Path, rate: int, duration_s: float, timeout_s: float
) -> dict[str, Any]:
    """``writeStream.format("lakewarden")`` into a table like ``lakewarden ingest``'s."""
    from benchmarks._ingest_sinks import lakewarden_latencies, start_format_sink
    from lakewarden.api.table import Table

    table = _demo_table(root / f"latency-format-{rate}-{uuid.uuid4().hex[:6]}")
    produced = _parsed_into(
        spark,
        settings,
        (table, Table.open(str(table)).config),
        lambda good, checkpoint: start_format_sink(good, table, checkpoint, settings, TRIGGER),
        (rate, duration_s, timeout_s),
    )
    latencies, instants = lakewarden_latencies(str(table))
    return _summary(latencies, produced, instants)


def _demo_table(path: Path) -> Path:
    """The demo's table (``lakewarden ingest``'s) created at ``path``."""
    from lakewarden.demo import create_table

    create_table(path)
    return path


def _parsed_into(
    spark: Any,
    settings: Any,
    target: tuple[Path, Any],
    start: Callable[[Any, Path], Any],
    pace: tuple[int, float, float],
) -> dict[str, Any]:
    """Steps 1-3 for a query of Spark's: a topic of its own, parsed as every sink parses it
    into the columns of ``target``'s table config, into the query ``start(parsed,
    checkpoint)`` starts (``target``'s path names the topic and lies beside its checkpoint
    and bad records); ``pace``: rate, duration and timeout. Returns what the producer
    reported."""
    from benchmarks._ingest_sinks import parsed_stream

    work, config = target
    rate, duration_s, timeout_s = pace
    bootstrap, topic = settings.kafka.bootstrap_servers, _topic(settings, work.name)
    good = parsed_stream(spark, bootstrap, topic, config, work.with_name(f"{work.name}-bad"), None)
    checkpoint = work.with_name(f"{work.name}-checkpoint")

    def read_so_far(query: Any) -> int:
        return sum(int(p.numInputRows) for p in query.recentProgress)

    return _run_and_measure(
        lambda: start(good, checkpoint),
        lambda: _produce_at_rate(bootstrap, topic, rate, duration_s),
        read_so_far,
        timeout_s,
    )


def _lakewarden_latency(
    spark: Any, settings: Any, root: Path, rate: int, duration_s: float, timeout_s: float
) -> dict[str, Any]:
    from lakewarden.spark.ingest import IngestJob, IngestSpec

    name = f"latency-{rate}-{uuid.uuid4().hex[:6]}"
    bootstrap, topic = settings.kafka.bootstrap_servers, _topic(settings, name)
    table = _demo_table(root / name)
    spec = IngestSpec(
        topic=topic,
        table=str(table),
        bootstrap=bootstrap,
        checkpoint=root / f"{name}-checkpoint",
        trigger_s=0.0,
        starting_offsets="earliest",
        settings=settings,
    )
    jobs: list[Any] = []

    def start() -> Any:
        jobs.append(IngestJob.start(spark, spec))
        return jobs[0].query

    def read_so_far(query: Any) -> int:
        jobs[0].poll()  # raises IngestError when the query failed
        return jobs[0].totals.input_rows

    produced = _run_and_measure(
        start, lambda: _produce_at_rate(bootstrap, topic, rate, duration_s), read_so_far, timeout_s
    )
    from benchmarks._ingest_breakdown import breakdown, p50s
    from benchmarks._ingest_sinks import lakewarden_latencies

    latencies, instants = lakewarden_latencies(str(table))
    summary = _summary(latencies, produced, instants)
    outcomes = list(jobs[0].writer.outcomes) if jobs[0].writer is not None else []
    summary["breakdown_p50_ms"] = p50s(breakdown(jobs[0].totals.reports, outcomes, str(table)))
    summary["batch_p50_ms"] = statistics.median(r.duration_ms for r in jobs[0].totals.reports)
    summary["one_task_batches"] = sum(o.one_task for o in outcomes)
    return summary


def _wait_for(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"ingest latency: no {what} within {timeout_s:g} s")
        time.sleep(0.1)
