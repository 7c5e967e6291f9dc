"""What publishing a Delta log adds to a Python ``Table.write``, same run.

Two copy-on-write tables of the same shape (4 partitions x 4 buckets), one with
``publish_delta`` on: each round inserts the same number of fresh records into both, in
alternating order, so both sides meet the same machine load. Every write of the publishing
table also writes its Delta version (stats read from the new files' footers) and, every ten
versions, a checkpoint. Reported: the median write time of each side and their ratio (goal
from issue 33: at most 1.05 for a Spark insert; a Python write has no Spark job around it, so
its ratio is the upper bound of the overhead).

``--lag`` (benchmark ``publisher-lag``) measures the publisher service instead, on a real
broker, at a commit rate Python writers on this machine cannot sustain (a one-row upsert
through ``Table.write`` takes tens of milliseconds of CPU). So the commits are written
before the measured window and revealed during it:

1. setup, untimed: ``--writers`` processes create ``--tables`` tables with publishing on and
   commit ``rate x seconds / tables`` one-row upserts to each (real lakewarden commits on
   local disk: data files, timeline entries; the writers do not publish), then move each
   commit's timeline entries aside, so every table's timeline ends at its creation again;
2. the publisher service starts, learns every table (registrations on ``clean.requests``),
   and syncs each once (nothing to publish beyond version 0);
3. measured: at ``--rate`` commits per second, round robin over the tables (each table's
   commits in order), the next commit's timeline entries are renamed back into place (the
   ``completed`` entry last: the moment the commit becomes visible) and its ``completed``
   event is announced on the timeline topic, as the committing writer would.

The publisher does the real work for every commit: reads the new timeline entries, the new
data file's footer, writes the Delta version create-if-absent. What the generator does not
do in the window is the write itself (the data file, the lock, the first entries), so the
machine is less busy than it would be with real writers at this rate. Reported: the lag of
each commit from its reveal to its Delta version's file (the file's mtime), p50 and p99,
against the same events' delivery to a plain consumer of the timeline topic, same run; the
details add the median lag of the first, middle and last third of the commits (a publisher
that falls behind shows a rising trend) and the service's CPU seconds.

Run alone with ``python -m benchmarks.bench_publish [--quick]`` or
``python -m benchmarks.bench_publish --lag [--tables N --rate R --seconds S --writers W]``.
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
from lakewarden.api.table import Table
from lakewarden.clients import request_clean
from lakewarden.clients.timeline_events import transition_record
from lakewarden.events import EventProducer, decode, ensure_topics
from lakewarden.events.topics import TIMELINE
from lakewarden.settings import Settings
from lakewarden.table import EmbeddedCoordinator, Transition
from lakewarden.table.checkpoint import TIMELINE_PREFIX
from lakewarden.table.timeline_state import TimelineEntry
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
    """One pre-written commit: its table, the timeline entries it appended (hidden until the
    measured window reveals them) and its ``completed`` entry, announced when revealed."""

    table_id: str
    uri: str
    seqs: tuple[int, ...]
    entry: TimelineEntry
    version: int  # the Delta version that publishes it

    @property
    def key(self) -> str:
        return f"{self.uri}/_delta_log/{self.version:020d}.json"


def _entry_file(uri: str, seq: int) -> Path:
    return Path(uri) / TIMELINE_PREFIX / f"{seq:020d}.json"


def _hidden_file(uri: str, seq: int) -> Path:
    return Path(uri) / "_bench_hidden" / f"{seq:020d}.json"


def _prewrite(root: str, names: list[str], per_table: int) -> list[list[_Commit]]:
    """In a writer process: create the tables ``names`` under ``root`` (publishing on) and
    commit ``per_table`` one-row upserts to each (the writer does not publish), then move the
    timeline entries of those commits aside (``_hidden_file``): each table's timeline ends at
    its creation again, its data files and Delta version 0 in place. Returns each table's
    commits in order.

    This process skips ``fsync`` (a throwaway writer process; durability is not what the
    benchmark measures, and on a shared disk the flushes made the setup take many minutes).
    The publisher service keeps its own."""
    os.fsync = lambda fd: None
    made = []
    for name in names:
        uri = f"{root}/{name}"
        table = Table.create(
            uri,
            name=name,
            record_key="id",
            schema=_LAG_SCHEMA,
            publish_delta=True,
            coordinator=EmbeddedCoordinator(),
        )
        table.timeline_log.after_completed = None
        created = table.timeline_log.load().tail_seq
        for k in range(per_table):
            table.write(pa.table({"id": [0], "v": [k]}, schema=_LAG_SCHEMA), "upsert")
        commits, seqs = [], []
        for entry in table.timeline_log.entries(after_seq=created):
            seqs.append(entry.seq)
            if entry.transition is Transition.COMPLETED:
                version = len(commits) + 1
                commits.append(_Commit(table.table_id, uri, tuple(seqs), entry, version))
                seqs = []
        if len(commits) != per_table or seqs:
            raise RuntimeError(f"{uri}: expected {per_table} commits, found {len(commits)}")
        _hidden_file(uri, 0).parent.mkdir()
        for commit in commits:
            for seq in commit.seqs:
                os.rename(_entry_file(uri, seq), _hidden_file(uri, seq))
        made.append(commits)
    return made


def _reveal(commit: _Commit) -> None:
    """Put the commit's timeline entries back, in seq order (the ``completed`` one last)."""
    for seq in commit.seqs:
        os.rename(_hidden_file(commit.uri, seq), _entry_file(commit.uri, seq))


def _emit_at_rate(
    settings: Settings, commits: list[_Commit], rate: float, start_at: float
) -> list[float]:
    """From wall time ``start_at``, every ``1 / rate`` s the next commit: its entries revealed,
    its ``completed`` entry announced on the timeline topic. Returns when each was revealed."""
    # One producer stands for every writer: queue each event, never wait for it (a writer
    # waits for its own one; here that wait would hold back the next commit's reveal).
    producer = EventProducer(settings, producer_id="bench-commits", linger_ms=0)
    revealed = []
    try:
        for k, commit in enumerate(commits):
            delay = start_at + k / rate - time.time()
            if delay > 0:
                time.sleep(delay)
            _reveal(commit)
            revealed.append(time.time())
            record = transition_record(
                commit.entry, table_id=commit.table_id, producer_id=commit.entry.actor
            )
            producer.send("TimelineTransition", record, topic=TIMELINE)
    finally:
        producer.close()
    return revealed


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


def _by_thirds(lag: list[float]) -> list[float]:
    """The median lag of the first, middle and last third of the commits (in emission
    order): a publisher that keeps up has no upward trend."""
    third = max(1, len(lag) // 3)
    parts = [lag[:third], lag[third : 2 * third], lag[2 * third :]]
    return [statistics.median(part) for part in parts if part]


def measure_lag(
    settings: Settings, *, tables: int, rate: float, seconds: float, writers: int = 2
) -> dict[str, Any]:
    """``rate`` commits per second over ``tables`` tables for ``seconds``, pre-written by
    ``writers`` processes and revealed and announced at the rate (module docstring); the
    publisher service publishes them. Returns the lag of each commit to its Delta version
    and to a plain consumer of its event in this process."""
    prefix = f"bench-pub-{uuid.uuid4().hex[:8]}."
    settings = settings.model_copy(
        update={"kafka": settings.kafka.model_copy(update={"topic_prefix": prefix})}
    )
    ensure_topics(settings)
    writers = max(1, min(writers, tables))
    per_table = max(1, round(rate * seconds / tables))
    names = [f"t{i:05d}" for i in range(tables)]
    shares = [names[w::writers] for w in range(writers)]
    with tempfile.TemporaryDirectory(prefix="lw-bench-publisher-") as tmp:
        root = Path(tmp)
        made = time.perf_counter()
        with ProcessPoolExecutor(writers, mp_context=multiprocessing.get_context("spawn")) as pool:
            written = pool.map(
                _prewrite, [str(root / "tables")] * writers, shares, [per_table] * writers
            )
            by_table = [table for share in written for table in share]
        prewrite_s = time.perf_counter() - made
        # Round robin: the j-th commit of every table, then the (j+1)-th.
        commits = [table[j] for j in range(per_table) for table in by_table]
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
            for table in by_table:
                first = table[0]
                request_clean(
                    settings, table_id=first.table_id, table_uri=first.uri, producer=producer
                )
            _wait(
                lambda: _metric(service, "lakewarden_publisher_tables_owned") == tables
                and _metric(service, "lakewarden_publisher_tables_queued") == 0,
                300,
                "the publisher to learn every table",
            )
            time.sleep(2.0)  # the registrations' syncs (nothing to publish) run out
            cpu_before = _service_cpu(service)
            syncs_before = _sync_totals(service)
            start_at = time.time() + 1.0
            revealed = _emit_at_rate(settings, commits, rate, start_at)
            emitted_s = revealed[-1] - start_at
            _wait(lambda: None not in _published_at(commits), 600, "every commit to be published")
            cpu_s = _service_cpu(service) - cpu_before
            syncs_after = _sync_totals(service)
            sync_count = syncs_after[0] - syncs_before[0]
            sync_s = syncs_after[1] - syncs_before[1]
            _wait(
                lambda: all((c.table_id, c.entry.seq) in deliveries.arrived for c in commits),
                60,
                "every event to reach the plain consumer",
            )
            published = _published_at(commits)
            lag = [p - at for p, at in zip(published, revealed, strict=True) if p is not None]
            delivered = [
                deliveries.arrived[(c.table_id, c.entry.seq)] - at
                for c, at in zip(commits, revealed, strict=True)
            ]
            drained_s = max(p for p in published if p is not None) - start_at
        finally:
            deliveries.close()
            producer.close()
            service.stop()
    return {
        "tables": tables,
        "writers": writers,
        "commits_per_table": per_table,
        "target_rate_per_s": rate,
        "achieved_rate_per_s": (len(commits) - 1) / emitted_s if emitted_s > 0 else 0.0,
        "commits": len(commits),
        "seconds": emitted_s,
        "published_by_s": drained_s,
        "prewrite_s": prewrite_s,
        "publisher_cpu_s": cpu_s,
        "publisher_syncs": sync_count,
        "publisher_sync_mean_s": sync_s / sync_count if sync_count else 0.0,
        "publish_lag_s": _quantiles(lag),
        "publish_lag_by_third_p50_s": _by_thirds(lag),
        "event_delivery_lag_s": _quantiles(delivered),
    }


def _sync_totals(service: ServiceProcess) -> tuple[float, float]:
    """How many syncs the service ran so far, and their seconds in all."""
    name = "lakewarden_publisher_sync_duration_seconds"
    return _metric(service, f"{name}_count"), _metric(service, f"{name}_sum")


def _service_cpu(service: ServiceProcess) -> float:
    """CPU seconds (user + system) the service process has used so far, from /proc."""
    pid = service.pid
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@benchmark("publisher-lag", "the publisher service's lag at a steady commit rate over many tables")
def bench_publisher_lag(ctx: BenchContext) -> Iterator[Result]:
    n = measure_lag(
        ctx.kafka_settings(),
        tables=ctx.scale(1000, 50),
        rate=ctx.scale(100, 20),
        seconds=ctx.scale(30, 10),
    )
    yield from _lag_results(n)


def _lag_results(n: dict[str, Any]) -> Iterator[Result]:
    for q in ("p50", "p99"):
        yield Result(
            benchmark="publisher-lag",
            metric=(
                f"publisher lag {q}: completed entry to its Delta version "
                f"({n['target_rate_per_s']:.0f} commits/s offered over {n['tables']} tables)"
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
    parser.add_argument("--tables", type=int, default=1000, help="--lag: tables (1000)")
    parser.add_argument("--rate", type=float, default=100.0, help="--lag: commits/s (100)")
    parser.add_argument("--seconds", type=float, default=30.0, help="--lag: how long (30)")
    parser.add_argument(
        "--writers", type=int, default=2, help="--lag: processes pre-writing the commits (2)"
    )
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
