"""A lake through the real stack: N tables, every service, writers, and 1, 2, 4 cleaners.

Every service runs as its own process on this run's broker (timeline-lock, heartbeat-monitor,
job-committer, error-sink, cancel-manager, publisher, and cleaner instances in one consumer
group). N tables (``--tables``, default 200; 40 with ``--quick``) are created on local files
(``/dev/shm``) under keep-latest-commits=1 with no retention window, and registered with the
cleaners by a ``CleanRequest`` each. Cleaners run with a 5 ms store latency per call
(``LAKEWARDEN_CLEANER_STORE_LATENCY_MS``: a remote object store, as ``bench_cleaner`` does)
and sweep every 30 s. Heartbeats: 1 s interval, 3 misses (3 s tolerance). In order:

1. **Idle memory** of every service (VmRSS) before any table exists: the memory baseline.
2. **Cleaner scaling.** With 1, then 2, then 4 cleaner instances: one superseded file is
   made in every table (embedded writes, invisible to Kafka), then a ``CleanRequest`` for
   every table at once; the clock stops when the ``timeline`` topic carries a completed clean
   of every table. Value: tables cleaned per second; baseline: 1 instance. At each count the
   burst measured is the second: the first after the instances changed runs on tables their
   new owners have not opened yet (an owner keeps each table's timeline in memory; a cold
   clean reads it all), reported on its own against the measured one, so every count is
   measured in the same state. Details per burst: each instance's CPU and, per instance,
   the burst's tables it cleaned, when its first and last of them completed, and where its
   cleans' time went (the cleaner's ``lakewarden_cleaner_phase_seconds``: queue wait, lock
   acquire, release, announce, liveness, storage). The time until every table had an owner
   after the second instance joined is the churn's baseline.
3. **Heartbeat detection lag, idle**: writer processes begin an instant through the Kafka
   coordinator and are killed with SIGKILL; each ``HeartbeatExpired`` gives
   ``detected_ms - (last_seen_ms + tolerance_ms)``.
4. **Steady load** (4 cleaners): W writer processes (``_lake_writer.py steady``) commit small
   writes through timeline-lock, heartbeat-monitor and job-committer at a steady rate, each
   followed by the same write to an embedded twin table in the same process: the coordination
   overhead, p50 and p99 against embedded. Meanwhile: killed writers again (the detection lag
   with the lake live, against 3.), then one cleaner killed with SIGKILL and one added: the
   time until the live instances own every table again.
5. **Nobody forgotten**: one more superseded file in every table (no event: only the owners'
   sweeps find it); every table must get a clean (else the benchmark fails), timed.
6. **Cleaner lag** from the written tables' timelines: for each commit of the steady load, the
   end of the first clean planned after it, minus its completion (the policy keeps nothing
   older, so all of it is lag). Baseline: one embedded ``Table.clean`` of the same kind of
   table at the same store latency, in this process.
7. **Memory under load** of every service against its idle figure; the growth per 1,000
   tables is in the details.

Run alone with ``python -m benchmarks lake [--tables 1000] [--quick]``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks._registry import BenchContext, Result, benchmark
from lakewarden.events import EventConsumer, EventProducer, ensure_topics, make_event
from lakewarden.events.topics import CLEAN_REQUESTS, HEARTBEAT_EXPIRED, TIMELINE
from lakewarden.settings import Settings
from lakewarden.storage.faults import FaultyStorage
from lakewarden.table import Action, CleanPolicy, EmbeddedCoordinator, Table, Transition
from lakewarden_services._common.process import ServiceProcess

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
KEEP_ONE = CleanPolicy(commits_retained=1, retention_window_s=0)
STORE_LATENCY_MS = 5.0
SWEEP_S = 30.0
BEAT = {"LAKEWARDEN_HEARTBEAT__INTERVAL_S": "1", "LAKEWARDEN_HEARTBEAT__TOLERABLE_MISSES": "3"}
CLEANER_ENV = {
    "LAKEWARDEN_CLEANER_SWEEP_INTERVAL_S": str(SWEEP_S),
    "LAKEWARDEN_CLEANER_STORE_LATENCY_MS": str(STORE_LATENCY_MS),
}
SERVICES = (
    "timeline_lock",
    "heartbeat_monitor",
    "job_committer",
    "error_sink",
    "cancel_manager",
    "publisher",
)
WRITERS = 4
TABLES_PER_WRITER = 5
KILLS = 5


# -- tables, made in a forked pool (no Kafka client in the parent yet) -------------------------


def _create(uri: str) -> str:
    table = Table.create(
        uri,
        name=Path(uri).name,
        record_key="id",
        schema=SCHEMA,
        clean_policy=KEEP_ONE,
        coordinator=EmbeddedCoordinator(),
    )
    table.write(pa.Table.from_pylist([{"id": 1, "v": "0"}], schema=SCHEMA))
    return table.table_id


def _supersede(uri: str) -> None:
    """One more version of the table's one file group: the previous one is garbage."""
    table = Table.open(uri, coordinator=EmbeddedCoordinator())
    table.write(pa.Table.from_pylist([{"id": 1, "v": uuid.uuid4().hex}], schema=SCHEMA))


# -- what the services do, seen from outside --------------------------------------------------


class _Cleans:
    """Follows the ``timeline`` topic: when each table's cleans completed (epoch seconds)."""

    def __init__(self, settings: Settings) -> None:
        self.consumer = EventConsumer(
            settings,
            group_id=f"bench-lake-{uuid.uuid4().hex[:6]}",
            topics=[TIMELINE],
            dead_letters=False,
            auto_offset_reset="earliest",
        )
        self.done: dict[str, list[float]] = {}
        self.by: dict[tuple[str, float], str] = {}  # (table, completed at) -> the cleaner's actor
        self._guard = threading.Lock()
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._halt.is_set():
            event = self.consumer.poll(0.2)
            if event is None or event.name != "TimelineTransition":
                continue
            record = event.record
            if record["action"] == "clean" and record["transition"] == "completed":
                with self._guard:
                    table_id = record["envelope"]["table_id"]
                    now = time.time()
                    self.done.setdefault(table_id, []).append(now)
                    self.by[(table_id, now)] = str(record["actor"])

    def cleaned_since(self, table_ids: list[str], since: float) -> dict[str, float]:
        """The first clean completion after ``since`` of each table that has one."""
        with self._guard:
            return {
                t: min(x for x in self.done[t] if x > since)
                for t in table_ids
                if any(x > since for x in self.done.get(t, ()))
            }

    def actor(self, table_id: str, at: float) -> str:
        """Which cleaner completed ``table_id``'s clean at ``at``."""
        with self._guard:
            return self.by.get((table_id, at), "?")

    def wait_all(self, table_ids: list[str], since: float, *, timeout_s: float) -> dict[str, float]:
        deadline = time.monotonic() + timeout_s
        while len(got := self.cleaned_since(table_ids, since)) < len(table_ids):
            if time.monotonic() > deadline:
                missing = sorted(set(table_ids) - set(got))
                raise AssertionError(f"{len(missing)} tables never cleaned, e.g. {missing[:5]}")
            time.sleep(0.2)
        return got

    def close(self) -> None:
        self._halt.set()
        self._thread.join(10)
        self.consumer.close()


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _owned(cleaners: list[ServiceProcess]) -> float:
    total = 0.0
    for cleaner in cleaners:
        _, body = cleaner.get("/metrics")
        for line in body.splitlines():
            if line.startswith("lakewarden_cleaner_tables_owned "):
                total += float(line.split()[-1])
    return total


def _phases(cleaner: ServiceProcess) -> dict[str, tuple[float, float]]:
    """A cleaner's phase histograms so far: phase -> (sum of seconds, count of cleans)."""
    _, body = cleaner.get("/metrics")
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for line in body.splitlines():
        for suffix, into in (("_sum{", sums), ("_count{", counts)):
            head = "lakewarden_cleaner_phase_seconds" + suffix
            if line.startswith(head):
                phase = line[len(head) :].split('"')[1]
                into[phase] = float(line.split()[-1])
    return {phase: (sums[phase], counts.get(phase, 0.0)) for phase in sums}


def _phase_breakdown(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]
) -> dict[str, Any]:
    """Cleans between two scrapes and each phase's mean in ms."""
    cleans = max((after[p][1] - before.get(p, (0.0, 0.0))[1] for p in after), default=0.0)
    mean_ms = {
        p: round((after[p][0] - before.get(p, (0.0, 0.0))[0]) * 1000 / cleans, 1)
        for p in after
        if cleans
    }
    return {"cleans": int(cleans), "mean_ms": mean_ms}


def _wait_owned(cleaners: list[ServiceProcess], tables: int, started: float) -> float:
    """Seconds from ``started`` until the live cleaners own every table (twice in a row)."""
    deadline = time.monotonic() + 300
    reached: float | None = None
    while reached is None or time.monotonic() - reached < 1.0:  # held for a report period
        if time.monotonic() > deadline:
            raise AssertionError(f"cleaners own {_owned(cleaners)} of {tables} tables after 300 s")
        if _owned(cleaners) != tables:
            reached = None
        elif reached is None:
            reached = time.monotonic()
        time.sleep(0.1)
    return reached - started


def _quantile(values: list[float], q: float) -> float:
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def _env(settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        **BEAT,
        "LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS": settings.kafka.bootstrap_servers or "",
        "LAKEWARDEN_KAFKA__TOPIC_PREFIX": settings.kafka.topic_prefix,
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
    }


def _detection_lags(settings: Settings, uris: list[str], expiries: EventConsumer) -> list[float]:
    """Start a doomed writer on each of ``uris``, SIGKILL them all once they beat, and return
    each instant's detection lag (ms past its tolerance) from its ``HeartbeatExpired``."""
    writers = [
        subprocess.Popen(
            [sys.executable, "-m", "benchmarks._lake_writer", "doomed", uri],
            env=_env(settings),
            stdout=subprocess.PIPE,
            text=True,
        )
        for uri in uris
    ]
    instants = set()
    for writer in writers:
        assert writer.stdout is not None
        instants.add(writer.stdout.readline().split()[1])
    for writer in writers:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        if writer.stdout is not None:
            writer.stdout.close()
    lags: dict[str, float] = {}
    deadline = time.monotonic() + 120
    while len(lags) < len(instants) and time.monotonic() < deadline:
        event = expiries.poll(0.5)
        if event is not None and event.record["instant"] in instants:
            r = event.record
            lags[r["instant"]] = float(r["detected_ms"] - (r["last_seen_ms"] + r["tolerance_ms"]))
    if len(lags) < len(instants):
        raise AssertionError(f"{len(instants) - len(lags)} killed writers never declared dead")
    return list(lags.values())


def _cleaner_lags(uris: list[str], since_ms: int) -> list[float]:
    """Seconds from each commit (after ``since_ms``) to the end of the first clean planned
    after it."""
    lags = []
    for uri in uris:
        entries = list(Table.open(uri, coordinator=EmbeddedCoordinator()).timeline_log.entries())
        cleans = {
            e.instant: e.wall_time_ms
            for e in entries
            if e.action is Action.CLEAN and e.transition is Transition.COMPLETED
        }
        planned = [
            (e.wall_time_ms, cleans[e.instant])
            for e in entries
            if e.action is Action.CLEAN
            and e.transition is Transition.REQUESTED
            and e.instant in cleans
        ]
        for e in entries:
            if e.action is Action.CLEAN or e.transition is not Transition.COMPLETED:
                continue
            if e.wall_time_ms < since_ms:
                continue
            after = [done for start, done in planned if start >= e.wall_time_ms]
            if after:
                lags.append((min(after) - e.wall_time_ms) / 1000)
    return lags


def _embedded_clean_s(root: Path, rounds: int = 20) -> float:
    """Median seconds of one embedded clean (one superseded file, the cleaners' store latency)."""
    times = []
    for i in range(rounds):
        uri = str(root / f"baseline{i}")
        _create(uri)
        _supersede(uri)
        plain = Table.open(uri, coordinator=EmbeddedCoordinator())
        slow = Table(
            FaultyStorage(plain.storage, latency_s=STORE_LATENCY_MS / 1000),
            plain.config,
            coordinator=EmbeddedCoordinator(),
        )
        started = time.perf_counter()
        slow.clean()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


# -- the run ----------------------------------------------------------------------------------


class _Lake:
    def __init__(self, ctx: BenchContext, tables: int) -> None:
        self.pool = multiprocessing.get_context("fork").Pool(2)  # before any Kafka client
        self.root = Path(
            tempfile.mkdtemp(
                prefix="lw-bench-lake-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None
            )
        )
        self.count = tables
        base = ctx.kafka_settings()
        kafka = base.kafka.model_copy(update={"topic_prefix": f"lake{uuid.uuid4().hex[:6]}."})
        self.settings = base.model_copy(update={"kafka": kafka})
        ensure_topics(self.settings)
        self.services: dict[str, ServiceProcess] = {}
        self.cleaners: list[ServiceProcess] = []
        self._next_cleaner = 0
        self.details: dict[str, Any] = {"tables": tables, "uptime": os.getloadavg()}

    def start(
        self, name: str, module: str, env: dict[str, str], instance: str = "0"
    ) -> ServiceProcess:
        home = self.root / "homes" / f"{name}-{instance}"
        home.mkdir(parents=True)
        process = ServiceProcess(
            module, self.settings, home=home, instance_id=instance, extra_env={**BEAT, **env}
        )
        process.start(timeout_s=180)
        return process

    def add_cleaner(self) -> ServiceProcess:
        name = f"c{self._next_cleaner}"
        self._next_cleaner += 1
        cleaner = self.start("cleaner", "lakewarden_services.cleaner", CLEANER_ENV, name)
        self.cleaners.append(cleaner)
        return cleaner

    def close(self) -> None:
        for process in [*self.cleaners, *self.services.values()]:
            process.kill()
        self.pool.terminate()
        shutil.rmtree(self.root, ignore_errors=True)


def _scaling_burst(lake: _Lake, cleans: _Cleans, ids: list[str], uris: list[str]) -> dict[str, Any]:
    garbage = time.time()
    lake.pool.map(_supersede, uris, chunksize=16)
    cpu = {c.pid: _cpu_s(c.pid) for c in lake.cleaners if c.pid is not None}
    phases = {c.instance_id: _phases(c) for c in lake.cleaners}
    producer = EventProducer(lake.settings, producer_id="bench-lake")
    # Connected before the clock starts: the burst is the cleaners' time, not this client's
    # connection to the broker (created at its first send otherwise).
    producer.connect(CLEAN_REQUESTS)
    started = time.time()
    # A sweep may clean a table between its new garbage and the burst: it counts as done.
    early = len(cleans.cleaned_since(ids, garbage))
    for table_id, uri in zip(ids, uris, strict=True):
        record = make_event(
            "CleanRequest",
            table_id=table_id,
            producer_id="bench-lake",
            table_uri=uri,
            policy=None,
            delete_orphans=False,
            requested_by="bench-lake",
        )
        producer.send("CleanRequest", record, topic=CLEAN_REQUESTS)
    producer.flush()
    done = cleans.wait_all(ids, garbage, timeout_s=1800)
    elapsed = max(done.values()) - started
    producer.close()
    # Per instance: the burst's tables it cleaned, when its first and last of them completed
    # (seconds after the burst started), and where its cleans' time went (every clean it ran
    # during the burst: a table cleaned twice, by a sweep or a repeated trigger, counts twice).
    instances: dict[str, dict[str, Any]] = {}
    for table_id, at in done.items():
        actor = cleans.actor(table_id, at).removeprefix("cleaner-")
        mine = instances.setdefault(actor, {"tables": 0, "first_s": at - started, "last_s": 0.0})
        mine["tables"] += 1
        mine["first_s"] = round(min(mine["first_s"], at - started), 2)
        mine["last_s"] = round(max(mine["last_s"], at - started), 2)
    for c in lake.cleaners:
        if c.instance_id in phases:
            breakdown = _phase_breakdown(phases[c.instance_id], _phases(c))
            instances.setdefault(str(c.instance_id), {"tables": 0}).update(breakdown)
    return {
        "rate": len(ids) / elapsed,
        "seconds": elapsed,
        "cpu_cores_per_instance": [
            round((_cpu_s(pid) - before) / elapsed, 2) for pid, before in cpu.items()
        ],
        "instances": instances,
        "load": os.getloadavg()[0],
        "cleaned_by_a_sweep_before_the_burst": early,
    }


def _run_writers(lake: _Lake, uris: list[str], seconds: float) -> list[subprocess.Popen[str]]:
    writers = []
    for w in range(WRITERS):
        mine = uris[w * TABLES_PER_WRITER : (w + 1) * TABLES_PER_WRITER]
        twins = lake.root / f"twins{w}"
        twins.mkdir()
        spec = {"uris": mine, "twins": str(twins), "rate": 1.0, "seconds": seconds}
        writers.append(
            subprocess.Popen(
                [sys.executable, "-m", "benchmarks._lake_writer", "steady", json.dumps(spec)],
                env=_env(lake.settings),
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    return writers


def run(ctx: BenchContext, tables: int) -> Iterator[Result]:
    lake = _Lake(ctx, tables)
    try:
        yield from _measure(ctx, lake, tables)
    finally:
        lake.close()


def _measure(ctx: BenchContext, lake: _Lake, tables: int) -> Iterator[Result]:
    uris = [str(lake.root / "lake" / f"t{i:05d}") for i in range(tables)]
    (lake.root / "lake").mkdir()
    embedded_clean_s = _embedded_clean_s(lake.root / "baseline")
    for name in SERVICES:
        lake.services[name] = lake.start(name, f"lakewarden_services.{name}", {})
    lake.add_cleaner()
    idle = {name: _rss_mib(p.pid or 0) for name, p in lake.services.items()}
    idle["cleaner"] = _rss_mib(lake.cleaners[0].pid or 0)

    ids = lake.pool.map(_create, uris, chunksize=16)
    cleans = _Cleans(lake.settings)
    try:
        # 2. scaling: 1, 2, 4 instances. At each count a first burst (after the rebalance)
        # runs on tables their new owners have not opened yet: kept as "cold"; the measured
        # burst follows it, so every count is measured in the same state (tables registered,
        # opened by their owner). The first cold burst also registers every table.
        cold = {1: _scaling_burst(lake, cleans, ids, uris)}
        scaling = {1: _scaling_burst(lake, cleans, ids, uris)}
        joined = time.monotonic()
        lake.add_cleaner()
        join_s = _wait_owned(lake.cleaners, tables, joined)
        cold[2] = _scaling_burst(lake, cleans, ids, uris)
        scaling[2] = _scaling_burst(lake, cleans, ids, uris)
        lake.add_cleaner()
        lake.add_cleaner()
        _wait_owned(lake.cleaners, tables, time.monotonic())
        cold[4] = _scaling_burst(lake, cleans, ids, uris)
        scaling[4] = _scaling_burst(lake, cleans, ids, uris)

        # 3. detection lag, idle
        expiries = EventConsumer(
            lake.settings,
            group_id=f"bench-lake-x-{uuid.uuid4().hex[:6]}",
            topics=[HEARTBEAT_EXPIRED],
            dead_letters=False,
        )
        expiries.poll(0.5)
        doomed = uris[-2 * KILLS :]
        idle_lags = _detection_lags(lake.settings, doomed[:KILLS], expiries)

        # 4. steady load, killed writers, cleaner churn
        steady_s = ctx.scale(90, 30)
        written = uris[: WRITERS * TABLES_PER_WRITER]
        since_ms = int(time.time() * 1000)
        writers = _run_writers(lake, written, steady_s)
        live_lags = _detection_lags(lake.settings, doomed[KILLS:], expiries)
        victim = lake.cleaners.pop(1)
        churn_started = time.monotonic()
        victim.kill()
        lake.add_cleaner()
        churn_s = _wait_owned(lake.cleaners, tables, churn_started)
        outputs = [json.loads(w.communicate(timeout=steady_s + 600)[0]) for w in writers]
        loaded = {name: _rss_mib(p.pid or 0) for name, p in lake.services.items()}
        loaded["cleaner"] = max(_rss_mib(c.pid or 0) for c in lake.cleaners)

        # 5. nobody forgotten: garbage only the sweeps see
        after = time.time()  # before: a sweep may clean a table while the rest are written
        lake.pool.map(_supersede, uris, chunksize=16)
        swept = cleans.wait_all(ids, after, timeout_s=600)
        swept_s = max(swept.values()) - after
    finally:
        cleans.close()

    # 6. cleaner lag
    lags = _cleaner_lags(written, since_ms)
    service = [s for o in outputs for s in o["service"]]
    embedded = [s for o in outputs for s in o["embedded"]]
    failed = sum(o["failed"] for o in outputs)
    load = {"load_at_end": os.getloadavg(), "tables": tables}
    yield from _results(
        tables=tables,
        scaling=scaling,
        cold=cold,
        service=service,
        embedded=embedded,
        failed=failed,
        idle_lags=idle_lags,
        live_lags=live_lags,
        lags=lags,
        embedded_clean_s=embedded_clean_s,
        churn_s=churn_s,
        join_s=join_s,
        swept_s=swept_s,
        idle=idle,
        loaded=loaded,
        load=load,
    )


def _results(**m: Any) -> Iterator[Result]:
    n = m["tables"]
    load = m["load"]
    label = f"{n} tables"
    for q in (0.5, 0.99):
        yield Result(
            benchmark="lake",
            metric=f"commit through the services, p{round(q * 100)} ({label}, "
            f"{WRITERS} writers at 1 commit/s)",
            unit="s",
            value=_quantile(m["service"], q),
            baseline=_quantile(m["embedded"], q),
            baseline_label="the same commit embedded",
            details={**load, "commits": len(m["service"]), "failed": m["failed"]},
        )
    yield Result(
        benchmark="lake",
        metric=f"heartbeat detection lag p99, {label} live and writers committing",
        unit="ms",
        value=max(_quantile(m["live_lags"], 0.99), 1.0),
        baseline=max(_quantile(m["idle_lags"], 0.99), 1.0),
        baseline_label="the same kills with no writer committing",
        details={
            **load,
            "live_ms": m["live_lags"],
            "idle_ms": m["idle_lags"],
            "tolerance_ms": 3000,
        },
    )
    for q in (0.5, 0.99):
        yield Result(
            benchmark="lake",
            metric=f"cleaner lag p{round(q * 100)}, 4 cleaners ({label}, 5 ms per store call)",
            unit="s",
            value=_quantile(m["lags"], q),
            baseline=m["embedded_clean_s"],
            baseline_label="one embedded clean, same store latency",
            details={**load, "commits": len(m["lags"])},
        )
    scaling = m["scaling"]
    for c in (2, 4):
        yield Result(
            benchmark="lake",
            metric=f"tables cleaned/s, {c} cleaner instances ({label}, 5 ms per store call)",
            unit="tables/s",
            value=scaling[c]["rate"],
            baseline=scaling[1]["rate"],
            baseline_label="1 cleaner instance",
            lower_is_better=False,
            goal=3.5 if c == 4 else None,
            details={**load, "by_instances": {str(k): v for k, v in scaling.items()}},
        )
    cold = m["cold"]
    yield Result(
        benchmark="lake",
        metric=f"tables cleaned/s, 4 cleaner instances right after the rebalance ({label}, "
        "tables new to their owners)",
        unit="tables/s",
        value=cold[4]["rate"],
        baseline=scaling[4]["rate"],
        baseline_label="the same 4 instances once they have opened their tables",
        lower_is_better=False,
        details={**load, "by_instances": {str(k): v for k, v in cold.items()}},
    )
    yield Result(
        benchmark="lake",
        metric=f"every table owned again after a cleaner SIGKILL + one added ({label})",
        unit="s",
        value=m["churn_s"],
        baseline=m["join_s"],
        baseline_label="one cleaner joining (no death)",
        details=load,
    )
    yield Result(
        benchmark="lake",
        metric=f"every table cleaned by the sweeps after the churn ({label}, none forgotten)",
        unit="s",
        value=m["swept_s"],
        baseline=SWEEP_S,
        baseline_label="the sweep interval",
        details=load,
    )
    for name, rss in m["loaded"].items():
        idle = m["idle"][name]
        yield Result(
            benchmark="lake",
            metric=f"{name.replace('_', '-')} RSS with {label} live",
            unit="MiB",
            value=rss,
            baseline=idle,
            baseline_label="idle, no table",
            details={**load, "growth_mib_per_1000_tables": round((rss - idle) * 1000 / n, 1)},
        )


@benchmark(
    "lake",
    "the stack with every service over N tables (--tables): commit overhead, detection lag, "
    "cleaner lag and scaling over 1/2/4 instances, churn, memory",
)
def bench_lake(ctx: BenchContext) -> Iterator[Result]:
    yield from run(ctx, ctx.tables or ctx.scale(200, 40))
