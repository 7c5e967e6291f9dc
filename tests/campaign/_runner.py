"""One campaign run against a running :class:`CampaignStack`: create the tables, start the
writers, play the fault schedule, heal everything, stop the writers, wait for the cleaner,
read everything back and check it.

Steps of :func:`run_one`:

1. create the plan's tables (local folder, or S3 for a share of runs);
2. start one process per writer (``_writer.py``) and wait until each has opened its table;
3. play the schedule: each fault at its time, each heal ``down_s`` later (a killed writer comes
   back as a new incarnation, a killed service or broker is restarted by the dev stack);
4. at the end of the workload, heal what is still down or paused, then ask the writers to
   stop and wait for them (one that does not stop is a violation, and is killed);
5. wait until the cleaner has rolled back every write a killed writer left pending;
6. read the tables back and run the checkers (plus: no process left behind, every part of the
   stack healthy).
"""

from __future__ import annotations

import contextlib
import heapq
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _checkers import (
    KNOWN_ISSUES,
    Op,
    TableObservation,
    Violation,
    check_error_table,
    check_run,
    ops_from_history,
)
from _event_checkers import check_event_timeline
from _observe import error_rows, observe_table, quiet, raw_entries, timeline_events
from _schedule import FaultEvent, RunPlan, WriterPlan
from _service_checkers import ServiceOp, check_services, service_ops_from_history
from _stack import BUCKET, CampaignStack
from _writer import SCHEMA

from lakewarden.devstack import processes
from lakewarden.table.config import load_config
from lakewarden.table.connection import Connection, connect, load_storage
from lakewarden.table.table import Table

__all__ = ["RunResult", "reproduce_command", "run_one"]

SCRIPTS = {
    "writer": Path(__file__).with_name("_writer.py"),
    "executor": Path(__file__).with_name("_executor.py"),
    "spark": Path(__file__).with_name("_spark_writer.py"),
}
REPO_ROOT = Path(__file__).resolve().parents[2]
WRITER_START_S = 120.0  # importing pyarrow and confluent-kafka on a loaded 2-core machine
WRITER_STOP_S = 120.0  # a write may wait 30 s for the lock, then 30 s more for a second try
QUIESCE_S = 90.0  # heartbeat tolerance + cleaner sweep + rollback of every dead write
# An instant left only ``requested`` may be the known issue (KNOWN_ISSUES), which never
# settles: after this long it no longer holds the run up (it is still reported).
REQUESTED_SETTLE_S = 15.0
PROGRESS_S = 60.0
SPARK_START_S = 300.0
SPARK_PROGRESS_S = 300.0
GROUP_EXIT_S = 30.0
SPARK_EXTRA_STOP_S = 180.0  # a Spark writer still starting its session when asked to stop
ERROR_SINK_S = 60.0  # error-sink commits a completed write's bad rows within seconds


@dataclass
class RunResult:
    seed: int
    on_s3: bool
    faults: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)
    known: list[Violation] = field(default_factory=list)  # of KNOWN_ISSUES: reported apart
    services: Counter[str] = field(default_factory=Counter)  # table-service steps by outcome
    unannounced: int = 0  # timeline entries without their event, where that is allowed
    seconds: float = 0.0

    def summary(self) -> str:
        status = "FAIL" if self.violations else "known issue" if self.known else "ok"
        where = "s3" if self.on_s3 else "local"
        writes, faults = dict(sorted(self.outcomes.items())), dict(sorted(self.faults.items()))
        head = f"seed {self.seed}: {status} in {self.seconds:.0f} s ({where})"
        services = f"; services {dict(sorted(self.services.items()))}" if self.services else ""
        events = f"; entries unannounced {self.unannounced}" if self.unannounced else ""
        return f"{head}; writes {writes}; faults {faults}{services}{events}"


def reproduce_command(seed: int, duration_s: float) -> str:
    return f"make campaign RUNS=1 SEED={seed} DURATION={duration_s:g}"


@dataclass
class _Writer:
    plan: WriterPlan
    uri: str
    incarnation: int = 0
    proc: subprocess.Popen[bytes] | None = None
    pids: list[int] = field(default_factory=list)
    killed: set[int] = field(default_factory=set)  # incarnations ended by SIGKILL

    def actor(self, incarnation: int) -> str:
        prefix = {"writer": "campaign-", "executor": "executor-"}.get(self.plan.role, "spark-")
        return f"{prefix}{self.plan.name}-{incarnation}"


class _Run:
    def __init__(self, stack: CampaignStack, plan: RunPlan, home: Path) -> None:
        self.stack = stack
        self.plan = plan
        self.home = home
        self.stop_file = home / "stop"
        self.result = RunResult(plan.seed, plan.on_s3)
        self.extra: list[Violation] = []
        self.prefix = f"{uuid.uuid4().hex[:8]}"
        self.uris = {t.name: self._uri(t.name) for t in plan.tables}
        self.writers = {w.name: _Writer(w, self.uris[w.table]) for w in plan.writers}
        # Spark writers set bad rows aside into the error table when error-sink runs.
        self.error_table_on = "error-sink" in stack.services

    def _uri(self, table: str) -> str:
        if self.plan.on_s3:
            return f"s3://{BUCKET}/campaign-{self.prefix}/{table}"
        return str(self.home / "tables" / table)

    # -- 1. and 2. ---------------------------------------------------------------------------

    def create_tables(self, connection: Connection) -> None:
        settings = self.stack.settings()
        for table in self.plan.tables:
            Table.create(
                self.uris[table.name],
                name=table.name,
                record_key="key",
                schema=SCHEMA,
                partition_by=["part"],
                ordering_field="ts",
                table_type=table.table_type,
                buckets=table.buckets,
                coordinator=connection.coordinator,
                settings=settings,
            )

    def start_writer(self, writer: _Writer) -> None:
        writer.incarnation += 1
        history = self.home / "history" / f"{writer.plan.name}.{writer.incarnation}.jsonl"
        history.parent.mkdir(parents=True, exist_ok=True)
        spec = {
            "uri": writer.uri,
            "writer": writer.plan.name,
            "incarnation": writer.incarnation,
            "seed": writer.plan.seed,
            "storage_faults": [vars(f) for f in writer.plan.storage_faults],
            "history": str(history),
            "stop": str(self.stop_file),
            "cancel_manager": "cancel-manager" in self.stack.services,
            "bad_rows": self.error_table_on,
        }
        env = self.stack.client_env()
        if self.error_table_on and writer.plan.role == "spark":
            env["LAKEWARDEN_ERROR_TABLE__ENABLED"] = "true"
        env["PYTHONPATH"] = str(REPO_ROOT)
        log = self.home / "logs" / f"{writer.plan.name}.{writer.incarnation}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            writer.proc = subprocess.Popen(
                [sys.executable, str(SCRIPTS[writer.plan.role]), json.dumps(spec)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        writer.pids.append(writer.proc.pid)

    def wait_writers_started(self) -> None:
        def started() -> bool:
            for writer in self.writers.values():
                assert writer.proc is not None
                if writer.proc.poll() is not None:
                    raise AssertionError(
                        f"writer {writer.plan.name} exited at start: see {self.home / 'logs'}"
                    )
            # A Spark writer joins when its session is up (minutes on a loaded machine): the
            # schedule does not wait for it, and its faults may hit it while it starts.
            return all(
                _history_has_start(self.home, w)
                for w in self.writers.values()
                if w.plan.role != "spark"
            )

        _wait(started, WRITER_START_S, "every writer to open its table")

    # -- 3. and 4. ---------------------------------------------------------------------------

    def play(self) -> None:
        """Play the schedule; return with every fault healed."""
        t0 = time.monotonic()
        queue: list[tuple[float, int, str, FaultEvent]] = [
            (e.at_s, n, "hit", e) for n, e in enumerate(self.plan.faults)
        ]
        heapq.heapify(queue)
        counter = len(queue)
        while queue:
            at_s, _, action, event = queue[0]
            if action == "hit" and at_s > self.plan.duration_s:
                break
            delay = t0 + at_s - time.monotonic()
            if delay > 0 and at_s <= self.plan.duration_s:
                time.sleep(delay)  # the schedule is wall-clock by nature
            heapq.heappop(queue)
            if action == "hit":
                if self._hit(event):
                    counter += 1
                    heapq.heappush(queue, (at_s + event.down_s, counter, "heal", event))
            else:
                self._heal(event)
        remaining = t0 + self.plan.duration_s - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)
        for _, _, action, event in sorted(queue):  # step 4: heal what is still broken
            if action == "heal":
                self._heal(event)
        self.stack.resume_all()
        self.stack.up()

    def _hit(self, event: FaultEvent) -> bool:
        if event.kind.startswith("writer"):
            writer = self.writers[event.target]
            if writer.proc is None or writer.proc.poll() is not None:
                return False
            sig = signal.SIGKILL if event.kind == "writer_kill" else signal.SIGSTOP
            with contextlib.suppress(ProcessLookupError):
                os.killpg(writer.proc.pid, sig)
            if sig == signal.SIGKILL:
                writer.proc.wait()
                writer.killed.add(writer.incarnation)
        elif event.target not in self.stack.running():
            return False  # still coming back from an earlier fault: the draw is dropped
        elif event.kind in ("service_kill", "broker_restart"):
            self.stack.kill(event.target)
        else:
            self.stack.pause(event.target)
        self.result.faults[event.kind] += 1
        return True

    def _heal(self, event: FaultEvent) -> None:
        if event.kind == "writer_kill":
            self.start_writer(self.writers[event.target])
        elif event.kind == "writer_pause":
            proc = self.writers[event.target].proc
            if proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGCONT)
        elif event.kind in ("service_kill", "broker_restart"):
            self.stack.up()
        elif event.target in self.stack.running():
            self.stack.resume(event.target)

    def acknowledged(self) -> int:
        """Writes acknowledged so far, by every writer incarnation."""
        return sum(
            line.get("phase") == "ok"
            for path in (self.home / "history").glob("*.jsonl")
            for line in _read_jsonl(path)
        )

    def wait_for_progress(self) -> None:
        """With every fault healed, let the writers run until one more write is acknowledged
        (up to ``PROGRESS_S``): on a loaded machine a short run may otherwise end before the
        stack has recovered from its last fault, checking nothing. A Spark writer gets until
        it has an outcome of its own (up to ``SPARK_PROGRESS_S``: a write takes minutes here)."""
        before = self.acknowledged()
        with contextlib.suppress(AssertionError):
            _wait(lambda: self.acknowledged() > before, PROGRESS_S, "a write after the faults")
        with contextlib.suppress(AssertionError):
            _wait(self.spark_wrote, SPARK_PROGRESS_S, "a Spark write's outcome")

    def spark_wrote(self) -> bool:
        return all(
            any(
                line.get("phase") in ("ok", "fail", "unknown")
                for path in (self.home / "history").glob(f"{w.plan.name}.*.jsonl")
                for line in _read_jsonl(path)
            )
            for w in self.writers.values()
            if w.plan.role == "spark"
        )

    def start_spark_writers(self) -> None:
        """Spark writers first: their session takes minutes to start on a loaded machine, and
        the schedule should find them writing (``SPARK_START_S`` at most)."""
        spark = [w for w in self.writers.values() if w.plan.role == "spark"]
        for writer in spark:
            self.start_writer(writer)
        with contextlib.suppress(AssertionError):
            _wait(
                lambda: all(_history_has_start(self.home, w) for w in spark),
                SPARK_START_S,
                "the Spark writers' sessions",
            )

    def stop_writers(self) -> None:
        self.stop_file.touch()
        deadline = time.monotonic() + WRITER_STOP_S
        for writer in self.writers.values():
            assert writer.proc is not None
            extra = SPARK_EXTRA_STOP_S if writer.plan.role == "spark" else 0.0
            try:
                writer.proc.wait(timeout=max(1.0, deadline + extra - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.extra.append(
                    Violation("writer_hung", f"{writer.plan.name} still writing after the stop")
                )
                os.killpg(writer.proc.pid, signal.SIGKILL)
                writer.proc.wait()
                writer.killed.add(writer.incarnation)
        for writer in self.writers.values():
            for pid in writer.pids:
                # A Spark writer's JVM shuts down after its Python driver exits: a grace.
                with contextlib.suppress(AssertionError):
                    _wait(lambda p=pid: not processes.group_members(p), GROUP_EXIT_S, "exit")
                if processes.group_members(pid):
                    self.extra.append(
                        Violation("process_left_behind", f"writer {writer.plan.name} pid {pid}")
                    )

    # -- 5. and 6. ---------------------------------------------------------------------------

    def open_tables(self, connection: Connection) -> dict[str, Table]:
        settings = self.stack.settings()
        tables = {}
        for name, uri in self.uris.items():
            storage = load_storage(uri, settings)
            tables[name] = Table(storage, load_config(storage), coordinator=connection.coordinator)
        return tables

    def observe(self, connection: Connection) -> dict[str, TableObservation]:
        tables = {}
        for name, table in self.open_tables(connection).items():
            since = time.monotonic()
            with contextlib.suppress(AssertionError):
                _wait(
                    lambda t=table, s=since: quiet(t, time.monotonic() - s > REQUESTED_SETTLE_S),
                    QUIESCE_S,
                    f"table {name} to settle",
                )
            tables[name] = observe_table(table)
        return tables

    def ops_by_table(self) -> dict[str, list[Op]]:
        ops: dict[str, list[Op]] = {}
        for writer in self.writers.values():
            if writer.plan.role == "executor":
                continue
            for incarnation in range(1, writer.incarnation + 1):
                path = self.home / "history" / f"{writer.plan.name}.{incarnation}.jsonl"
                lines = _read_jsonl(path)
                found = ops_from_history(writer.plan.name, incarnation, lines)
                ops.setdefault(writer.plan.table, []).extend(found)
        return ops

    def service_ops_by_table(self) -> dict[str, list[ServiceOp]]:
        ops: dict[str, list[ServiceOp]] = {}
        for writer in self.writers.values():
            if writer.plan.role != "executor":
                continue
            for incarnation in range(1, writer.incarnation + 1):
                path = self.home / "history" / f"{writer.plan.name}.{incarnation}.jsonl"
                found = service_ops_from_history(writer.plan.name, _read_jsonl(path))
                ops.setdefault(writer.plan.table, []).extend(found)
        return ops

    def strict_actors(self) -> set[str]:
        """The appenders whose every timeline entry must have its event: Python writers and
        executors never killed and without lost storage replies, in a run whose broker was
        never restarted (``_event_checkers``)."""
        if self.result.faults["broker_restart"]:
            return set()
        return {
            writer.actor(incarnation)
            for writer in self.writers.values()
            if writer.plan.role != "spark"
            and not any(f.kind == "lose_reply" for f in writer.plan.storage_faults)
            for incarnation in range(1, writer.incarnation + 1)
            if incarnation not in writer.killed
        }

    def check_events(self, tables: dict[str, TableObservation]) -> list[Violation]:
        """The storage timeline of each table against its events on the timeline topic."""
        found: list[Violation] = []
        strict = self.strict_actors()
        for name, observation in tables.items():
            events = timeline_events(self.stack.settings(), observation.table_id)
            # Storage after the topic: the cleaner still appends (a clean each sweep), and an
            # entry is announced only once it is in storage.
            storage = load_storage(self.uris[name], self.stack.settings())
            violations, unannounced = check_event_timeline(
                raw_entries(storage), events, strict_actors=strict
            )
            self.result.unannounced += unannounced
            found += [Violation(v.name, f"table {name}: {v.detail}") for v in violations]
        return found

    def check_error_tables(self, ops_by_table: dict[str, list[Op]]) -> list[Violation]:
        """Each table's error table against the bad rows of its writes, once error-sink has
        committed those of every acknowledged write (or ``ERROR_SINK_S`` passed)."""
        found: list[Violation] = []
        for name, ops in ops_by_table.items():
            expected = {bad["v"] for op in ops if op.outcome == "ok" for bad in op.bad}
            if not any(op.bad for op in ops):
                continue
            uri, settings = f"{self.uris[name]}_errors", self.stack.settings()
            with contextlib.suppress(AssertionError):
                _wait(
                    lambda u=uri, e=expected, s=settings: e <= {r["v"] for r in error_rows(u, s)},
                    ERROR_SINK_S,
                    f"error-sink to commit the bad rows of table {name}",
                )
            found += [
                Violation(v.name, f"table {name}: {v.detail}")
                for v in check_error_table(ops, error_rows(uri, settings))
            ]
        return found

    def check_stack(self) -> None:
        unhealthy = self.stack.unhealthy()
        if unhealthy:
            self.extra.append(Violation("stack_unhealthy", f"parts not healthy: {unhealthy}"))
        for health in self.stack.devstack.status():
            if health.kind == "service" and not (found := _health_within(health.port))[0]:
                self.extra.append(
                    Violation(
                        "service_unhealthy",
                        f"{health.name} /health is not OK after {HEALTH_BOUND_S:g} s: {found[1]}",
                    )
                )


class _Reader(threading.Thread):
    """Reads every table over and over while the faults play: what each read showed is
    checked at the end (``Reads``), as every read must be a snapshot of committed writes."""

    def __init__(self, tables: dict[str, Table]) -> None:
        super().__init__(name="campaign-reader", daemon=True)
        self.tables = tables
        self.stop = threading.Event()
        self.reads: dict[str, list[list[dict[str, Any]]]] = {name: [] for name in tables}
        self.errors: list[str] = []

    def run(self) -> None:
        from lakewarden.errors import LakewardenError

        while not self.stop.wait(0.5):
            for name, table in self.tables.items():
                try:
                    rows = table.read(with_meta=True).select(["key", "v"]).to_pylist()
                except LakewardenError:
                    continue  # a named error (a storage fault, a racing clean): allowed
                except Exception as err:  # a raw error is a violation
                    self.errors.append(f"table {name}: {err!r}")
                    continue
                self.reads[name].append(rows)


def run_one(stack: CampaignStack, plan: RunPlan, home: Path) -> RunResult:
    """Run ``plan`` against ``stack`` (running) with its files under ``home``; the result
    lists every violation found. The stack is healthy again when it returns."""
    started = time.monotonic()
    home.mkdir(parents=True, exist_ok=True)
    (home / "plan.json").write_text(json.dumps(plan.to_json(), indent=1))
    run = _Run(stack, plan, home)
    for writer_plan in plan.writers:
        for fault in writer_plan.storage_faults:
            run.result.faults[f"storage_{fault.kind}"] += 1
    with connect(stack.settings(), require_kafka=True) as connection:
        run.create_tables(connection)
        try:
            run.start_spark_writers()
            for writer in run.writers.values():
                if writer.proc is None:
                    run.start_writer(writer)
            run.wait_writers_started()
            reader = _Reader(run.open_tables(connection))
            reader.start()
            try:
                run.play()
                run.wait_for_progress()
            finally:
                reader.stop.set()
                reader.join(60)
        finally:
            stack.resume_all()
            run.stop_writers()
        tables = run.observe(connection)
    ops = run.ops_by_table()
    run.result.outcomes.update(op.outcome for table_ops in ops.values() for op in table_ops)
    run.check_stack()
    found = run.extra + check_run(ops, tables, reads=reader.reads) + run.check_events(tables)
    found += run.check_error_tables(ops)
    for name, service_ops in run.service_ops_by_table().items():
        run.result.services.update(_service_outcome(op) for op in service_ops)
        found += [
            Violation(v.name, f"table {name}: {v.detail}")
            for v in check_services(service_ops, tables[name])
        ]
    found += [Violation("read_raw_error", error) for error in reader.errors[:5]]
    run.result.violations = [v for v in found if v.name not in KNOWN_ISSUES]
    run.result.known = [v for v in found if v.name in KNOWN_ISSUES]
    run.result.seconds = time.monotonic() - started
    (home / "result.json").write_text(
        json.dumps(
            {
                "summary": run.result.summary(),
                "violations": [str(v) for v in run.result.violations],
                "known_issues": [str(v) for v in run.result.known],
            },
            indent=1,
        )
    )
    return run.result


def _service_outcome(op: ServiceOp) -> str:
    """``run:completed``, ``cancel:accepted``, ``schedule:fail``...: how steps ended."""
    if op.phase != "done":
        return f"{op.step}:{op.phase}"
    if op.step == "schedule":
        return f"schedule:{'none' if op.plan is None else op.outcome}"
    return f"{op.step}:{op.outcome}"


def _history_has_start(home: Path, writer: _Writer) -> bool:
    path = home / "history" / f"{writer.plan.name}.{writer.incarnation}.jsonl"
    return any(line.get("phase") == "start" for line in _read_jsonl(path))


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = []
    for text in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(json.JSONDecodeError):  # the line a SIGKILL cut short
            lines.append(json.loads(text))
    return lines


# A service rejoins its group some seconds after a broker restart (10-12 s measured here under
# load 30-50): not OK for longer than this bound is a violation, not a single 503.
HEALTH_BOUND_S = 60.0


def _health_within(port: int, bound_s: float = HEALTH_BOUND_S) -> tuple[bool, str]:
    """(OK within ``bound_s``, the last /health body or error)."""
    deadline = time.monotonic() + bound_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as reply:
                return True, reply.read().decode()
        except urllib.error.HTTPError as err:
            last = err.read().decode()
        except OSError as err:
            last = repr(err)
        if time.monotonic() >= deadline:
            return False, last
        time.sleep(0.5)


def _wait(predicate: Any, timeout_s: float, what: str) -> None:
    from lakewarden.testing import wait_until

    wait_until(predicate, timeout_s, what)
