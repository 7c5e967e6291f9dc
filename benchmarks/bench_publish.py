"""What publishing a Delta log adds to a Python ``Table.write``, same run.

Two copy-on-write tables of the same shape (4 partitions x 4 buckets), one with
``publish_delta`` on: each round inserts the same number of fresh records into both, in
alternating order, so both sides meet the same machine load. Every write of the publishing
table also writes its Delta version (stats read from the new files' footers) and, every ten
versions, a checkpoint. Reported: the median write time of each side and their ratio (goal
from issue 33: at most 1.05 for a Spark insert; a Python write has no Spark job around it, so
its ratio is the upper bound of the overhead).

``--lag`` (benchmark ``publisher-lag``) measures the publisher service instead: on a real
broker, commits at a steady rate (``--rate``, default 100/s) round robin over ``--tables``
tables (default 1,000) for ``--seconds``, each ``completed`` entry announced on the timeline
topic and published by the service alone (the writers do not publish). Reported: the lag of
each commit to its Delta version's file (its mtime), p50 and p99, against the same commits'
event delivery to a plain consumer of the timeline topic, same run.

Run alone with ``python -m benchmarks.bench_publish [--quick]`` or
``python -m benchmarks.bench_publish --lag [--tables N --rate R --seconds S]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer

from benchmarks._registry import BenchContext, Result, benchmark
from benchmarks.bench_read import SCHEMA, make_rows
from lakewarden.clients import request_clean
from lakewarden.clients.timeline_events import TimelinePublisher
from lakewarden.events import EventProducer, decode, ensure_topics
from lakewarden.events.topics import TIMELINE
from lakewarden.settings import Settings
from lakewarden.table import EmbeddedCoordinator, Transition
from lakewarden.table.table import Table
from lakewarden_services._common.process import ServiceProcess


def _create(root: Path, name: str, *, publish: bool) -> Table:
    return Table.create(
        str(root / name),
        name=name,
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        ordering_field="ts",
        buckets=4,
        publish_delta=publish,
    )


def _batch(rows: int, round_no: int) -> pa.Table:
    batch = make_rows(rows)
    ids = pc.add(batch.column("id"), pa.scalar(rows * round_no, pa.int64()))
    return batch.set_column(0, "id", ids)


def measure(rows: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="lw-bench-publish-") as tmp:
        root = Path(tmp)
        plain = _create(root, "plain", publish=False)
        published = _create(root, "published", publish=True)
        times: dict[str, list[float]] = {"plain": [], "published": [], "publish_step": []}
        hook = published.timeline_log.after_completed
        assert hook is not None

        def timed_hook(entry: Any) -> None:
            started = time.perf_counter()
            hook(entry)
            times["publish_step"].append(time.perf_counter() - started)

        published.timeline_log.after_completed = timed_hook
        for r in range(rounds):
            batch = _batch(rows, r)
            order = [("plain", plain), ("published", published)]
            for name, table in order if r % 2 else reversed(order):
                started = time.perf_counter()
                table.write(batch, "insert")
                times[name].append(time.perf_counter() - started)
        versions = len(list((root / "published" / "_delta_log").glob("*.json")))
    return {
        "rows_per_write": rows,
        "rounds": rounds,
        "plain_median_s": statistics.median(times["plain"]),
        "published_median_s": statistics.median(times["published"]),
        "publish_step_median_s": statistics.median(times["publish_step"]),
        "delta_versions": versions,
    }


@benchmark("publish", "Table.write insert with Delta publishing on vs off, same run")
def bench_publish(ctx: BenchContext) -> Iterator[Result]:
    n = measure(ctx.scale(20_000, 2_000), ctx.scale(30, 10))
    yield Result(
        benchmark="publish",
        metric=f"insert of {n['rows_per_write']} records with publishing on (median)",
        unit="s",
        value=n["published_median_s"],
        baseline=n["plain_median_s"],
        baseline_label="the same insert into a table without publishing (median)",
        goal=1.05,
        details=n,
    )
    yield Result(
        benchmark="publish",
        metric="the publish step alone (one Delta version, inside the write above; median)",
        unit="s",
        value=n["publish_step_median_s"],
        baseline=n["plain_median_s"],
        baseline_label="the insert into a table without publishing (median)",
        goal=0.05,
        details=n,
    )


# --- The publisher service's lag -----------------------------------------------------------


_LAG_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int64())])


@dataclass(frozen=True)
class _Commit:
    table_id: str
    seq: int
    key: str  # the Delta version file that publishes it
    at: float  # wall time the ``completed`` entry was appended (after the write returned)


def _create_tables(root: str, names: list[str]) -> list[tuple[str, str]]:
    """Create the tables ``names`` under ``root`` (in a writer process): (table_id, uri)."""
    made = []
    for name in names:
        table = Table.create(
            f"{root}/{name}",
            name=name,
            record_key="id",
            schema=_LAG_SCHEMA,
            publish_delta=True,
            coordinator=EmbeddedCoordinator(),
        )
        made.append((table.table_id, f"{root}/{name}"))
    return made


def _commit_at_rate(
    settings_json: str, uris: list[str], rate: float, count: int, start_at: float
) -> list[_Commit]:
    """One writer process: ``count`` commits at ``rate`` per second round robin over ``uris``
    from wall time ``start_at``, each ``completed`` entry announced on the timeline topic. The
    writer does not publish: the service does."""
    settings = Settings.model_validate_json(settings_json)
    tables = [Table.open(uri, coordinator=EmbeddedCoordinator()) for uri in uris]
    for table in tables:
        table.timeline_log.after_completed = None
    announcer = TimelinePublisher(settings)
    versions = [0] * len(tables)
    commits = []
    try:
        for k in range(count):
            delay = start_at + k / rate - time.time()
            if delay > 0:
                time.sleep(delay)
            i = k % len(tables)
            table = tables[i]
            table.write(pa.table({"id": [0], "v": [k]}, schema=_LAG_SCHEMA), "upsert")
            at = time.time()
            entry = next(
                e
                for e in reversed(list(table.timeline_log.entries()))
                if e.transition is Transition.COMPLETED
            )
            versions[i] += 1
            key = f"{uris[i]}/_delta_log/{versions[i]:020d}.json"
            commits.append(_Commit(table.table_id, entry.seq, key, at))
            announcer.publish(table.table_id, entry)
    finally:
        announcer.close()
    return commits


def _metric(service: ServiceProcess, name: str) -> float:
    _, body = service.get("/metrics")
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


class _Deliveries:
    """A plain consumer of the timeline topic: when each ``completed`` event arrived."""

    def __init__(self, settings: Settings) -> None:
        self.arrived: dict[tuple[str, int], float] = {}
        self._stop = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": settings.kafka.bootstrap_servers,
                "group.id": f"bench-publisher-baseline-{uuid.uuid4().hex[:8]}",
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 10,
            }
        )
        self._consumer.subscribe([TIMELINE.name(settings)])
        self._thread = threading.Thread(target=self._run, name="baseline-consumer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            message = self._consumer.poll(0.05)
            if message is None or message.error() is not None:
                continue
            now = time.time()
            record = decode(message.value()).record
            if record.get("transition") == "completed":
                self.arrived[(record["envelope"]["table_id"], record["seq"])] = now

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout_s} s")
        time.sleep(0.05)


def _published_at(commits: list[_Commit]) -> list[float | None]:
    """Each commit's Delta version's creation time (its file's mtime), None while absent."""
    times: list[float | None] = []
    for commit in commits:
        try:
            times.append(os.stat(commit.key).st_mtime)
        except FileNotFoundError:
            times.append(None)
    return times


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]  # noqa: E731
    return {"p50": pick(0.5), "p99": pick(0.99), "max": ordered[-1]}


def measure_lag(
    settings: Settings, *, tables: int, rate: float, seconds: float, writers: int = 2
) -> dict[str, Any]:
    """Commits at ``rate`` per second over ``tables`` tables for ``seconds`` by ``writers``
    processes (each its share of the tables and of the rate), each announced on the timeline
    topic; the publisher service publishes them. Returns the lag of each commit to its Delta
    version and to a plain consumer of its event in this (otherwise idle) process."""
    prefix = f"bench-pub-{uuid.uuid4().hex[:8]}."
    settings = settings.model_copy(
        update={"kafka": settings.kafka.model_copy(update={"topic_prefix": prefix})}
    )
    ensure_topics(settings)
    writers = max(1, min(writers, tables))
    names = [f"t{i:05d}" for i in range(tables)]
    shares = [names[w::writers] for w in range(writers)]
    per_writer = max(1, round(rate * seconds / writers))
    with (
        tempfile.TemporaryDirectory(prefix="lw-bench-publisher-") as tmp,
        ProcessPoolExecutor(writers, mp_context=multiprocessing.get_context("spawn")) as pool,
    ):
        root = Path(tmp)
        made = time.perf_counter()
        created = list(pool.map(_create_tables, [str(root / "tables")] * writers, shares))
        create_s = time.perf_counter() - made
        service = ServiceProcess(
            "lakewarden_services.publisher",
            settings,
            home=root / "service",
            log_level="WARNING",
            extra_env={"LAKEWARDEN_PUBLISHER_SWEEP_INTERVAL_S": "3600"},
        )
        service.start()
        producer = EventProducer(settings, producer_id="bench-registrations")
        deliveries = _Deliveries(settings)
        try:
            for table_id, uri in (t for share in created for t in share):
                request_clean(settings, table_id=table_id, table_uri=uri, producer=producer)
            _wait(
                lambda: _metric(service, "lakewarden_publisher_tables_owned") == tables,
                300,
                "the publisher to learn every table",
            )
            start_at = time.time() + 2.0
            runs = pool.map(
                _commit_at_rate,
                [settings.model_dump_json()] * writers,
                [[uri for _, uri in share] for share in created],
                [rate / writers] * writers,
                [per_writer] * writers,
                [start_at] * writers,
            )
            commits = [c for run in runs for c in run]
            generated_s = max(c.at for c in commits) - start_at
            _wait(lambda: None not in _published_at(commits), 600, "every commit to be published")
            _wait(
                lambda: all((c.table_id, c.seq) in deliveries.arrived for c in commits),
                60,
                "every event to reach the plain consumer",
            )
            published = _published_at(commits)
            lag = [p - c.at for p, c in zip(published, commits, strict=True) if p is not None]
            delivered = [deliveries.arrived[(c.table_id, c.seq)] - c.at for c in commits]
        finally:
            deliveries.close()
            producer.close()
            service.stop()
    return {
        "tables": tables,
        "writers": writers,
        "target_rate_per_s": rate,
        "achieved_rate_per_s": len(commits) / generated_s,
        "commits": len(commits),
        "seconds": generated_s,
        "create_tables_s": create_s,
        "publish_lag_s": _quantiles(lag),
        "event_delivery_lag_s": _quantiles(delivered),
    }


@benchmark("publisher-lag", "the publisher service's lag at a steady commit rate over many tables")
def bench_publisher_lag(ctx: BenchContext) -> Iterator[Result]:
    n = measure_lag(
        ctx.kafka_settings(),
        tables=ctx.scale(200, 50),
        rate=ctx.scale(20, 10),
        seconds=ctx.scale(60, 15),
    )
    yield from _lag_results(n)


def _lag_results(n: dict[str, Any]) -> Iterator[Result]:
    for q in ("p50", "p99"):
        yield Result(
            benchmark="publisher-lag",
            metric=(
                f"publisher lag {q}: completed entry to its Delta version "
                f"({n['achieved_rate_per_s']:.0f} commits/s over {n['tables']} tables)"
            ),
            unit="s",
            value=n["publish_lag_s"][q],
            baseline=n["event_delivery_lag_s"][q],
            baseline_label=f"the timeline event's delivery to a plain consumer ({q})",
            budget=1.0,  # issue 33: published within a second of each commit
            details=n,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2k records, 10 rounds")
    parser.add_argument(
        "--lag", action="store_true", help="the publisher service's lag instead of the write"
    )
    parser.add_argument("--tables", type=int, default=200, help="--lag: tables (200)")
    parser.add_argument("--rate", type=float, default=20.0, help="--lag: commits/s (20)")
    parser.add_argument("--seconds", type=float, default=60.0, help="--lag: how long (60)")
    parser.add_argument("--writers", type=int, default=2, help="--lag: writer processes (2)")
    args = parser.parse_args()
    if not args.lag:
        for result in bench_publish(BenchContext(quick=args.quick)):
            print(json.dumps(result.as_json(), indent=2))
        return
    ctx = BenchContext()
    try:
        n = measure_lag(
            ctx.kafka_settings(),
            tables=args.tables,
            rate=args.rate,
            seconds=args.seconds,
            writers=args.writers,
        )
        for result in _lag_results(n):
            print(json.dumps(result.as_json(), indent=2))
    finally:
        ctx.close()


if __name__ == "__main__":
    main()
