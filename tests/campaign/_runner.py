"""One campaign run against a running :class:`CampaignStack`: create the tables, start the
writers, play the fault schedule, heal everything, stop the writers, wait for the cleaner,
read everything back and check it.

Steps of :func:`run_one`:

1. create the plan's tables (local folder, or S3 for a share of runs);
2. start the Spark writer first and wait until it has its session and made a first tiny write
   (bounded), then one process per other writer (``_processes``), waiting until each has
   opened its table: the workload clock and the fault schedule start after that;
3. play the schedule: each fault at its time, each heal ``down_s`` later (a killed writer comes
   back as a new incarnation, a killed service or broker is restarted by the dev stack);
4. at the end of the workload, heal what is still down or paused, then ask the writers to
   stop and wait for them (one that does not stop is a violation, and is killed);
5. wait until the cleaner has rolled back every write a killed writer left pending;
6. read the tables back and run the checkers (``_results``; plus: no process left behind,
   every part of the stack healthy).
"""

from __future__ import annotations

import contextlib
import heapq
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from _checkers import TableObservation, Violation, check_run
from _observe import observe_table, quiet
from _processes import REPO_ROOT, Workload, wait
from _results import Findings, RunResult, service_outcome
from _schedule import FaultEvent, RunPlan
from _service_checkers import check_services
from _stack import BUCKET, CampaignStack
from _writer import SCHEMA

from lakewarden.api.connection import Connection, connect
from lakewarden.api.table import Table
from lakewarden.storage import open_storage
from lakewarden.table.config import load_config

__all__ = ["REPO_ROOT", "RunResult", "reproduce_command", "run_one"]

# Heartbeat tolerance + cleaner sweep + rollback of every dead write. A write killed while it
# held the table lock keeps every appender (the cleaner's rollback too) out for one lock ttl
# (30 s), and one that never beat is rolled back three tolerances after its request: an
# instant left ``requested`` gets the same time as an inflight one.
QUIESCE_S = 90.0
PROGRESS_S = 60.0
SPARK_PROGRESS_S = 300.0


def reproduce_command(
    seed: int,
    duration_s: float,
    *,
    spark: float = 0.15,
    table_services: float = 0.5,
    mode: str = "kafka",
) -> str:
    """The command that replays run ``seed``: the shares (or the mode) are part of its plan."""
    if mode == "embedded":
        return f"make campaign RUNS=1 SEED={seed} DURATION={duration_s:g} MODE=embedded"
    shares = f" SPARK={spark:g} TABLE_SERVICES={table_services:g}"
    return f"make campaign RUNS=1 SEED={seed} DURATION={duration_s:g}{shares}"


class _Run:
    def __init__(self, stack: CampaignStack, plan: RunPlan, home: Path) -> None:
        self.stack = stack
        self.plan = plan
        self.home = home
        self.result = RunResult(plan.seed, plan.on_s3)
        self.prefix = f"{uuid.uuid4().hex[:8]}"
        self.uris = {t.name: self._uri(t.name) for t in plan.tables}
        self.workload = Workload(stack, plan, home, self.uris)

    def _uri(self, table: str) -> str:
        if self.plan.on_s3:
            return f"s3://{BUCKET}/campaign-{self.prefix}/{table}"
        return str(self.home / "tables" / table)

    # -- 1. ----------------------------------------------------------------------------------

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
            broker_back = [a for a, _, k, e in queue if k == "heal" and e.kind == "broker_pause"]
            if action == "hit":
                if self._hit(event):
                    counter += 1
                    heapq.heappush(queue, (at_s + event.down_s, counter, "heal", event))
            elif event.kind == "service_kill" and broker_back:
                # Restarting a service waits for the broker's topics, and this thread would
                # resume the broker only after that (seed 14): the restart comes right after.
                counter += 1
                heapq.heappush(queue, (max(broker_back), counter, "heal", event))
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
            if not self.workload.kill_or_pause(event.target, event.kind == "writer_kill"):
                return False
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
            self.workload.start(self.workload.by_name[event.target])
        elif event.kind == "writer_pause":
            self.workload.resume(event.target)
        elif event.kind in ("service_kill", "broker_restart"):
            self.stack.up()
        elif event.target in self.stack.running():
            self.stack.resume(event.target)

    def acknowledged(self) -> int:
        """Writes acknowledged so far, by every writer incarnation."""
        return sum(
            line.get("phase") == "ok"
            for _, _, lines in self.workload.all_histories()
            for line in lines
        )

    def wait_for_progress(self) -> None:
        """With every fault healed, let the writers run until one more write is acknowledged
        (up to ``PROGRESS_S``): on a loaded machine a short run may otherwise end before the
        stack has recovered from its last fault, checking nothing. A Spark writer gets until
        it has an outcome of its own after its first write (up to ``SPARK_PROGRESS_S``)."""
        before = self.acknowledged()
        with contextlib.suppress(AssertionError):
            wait(lambda: self.acknowledged() > before, PROGRESS_S, "a write after the faults")
        with contextlib.suppress(AssertionError):
            wait(self.spark_wrote, SPARK_PROGRESS_S, "a Spark write's outcome")

    def spark_wrote(self) -> bool:
        """Every Spark writer has the outcome of a write after its warm-up one."""
        outcomes: dict[str, int] = {}
        for writer, _, lines in self.workload.all_histories():
            if writer.plan.role == "spark":
                ended = sum(line.get("phase") in ("ok", "fail", "unknown") for line in lines)
                outcomes[writer.plan.name] = outcomes.get(writer.plan.name, 0) + ended
        return all(n >= 2 for n in outcomes.values())

    # -- 5. ----------------------------------------------------------------------------------

    def open_tables(self, connection: Connection) -> dict[str, Table]:
        settings = self.stack.settings()
        tables = {}
        for name, uri in self.uris.items():
            storage = open_storage(uri, settings)
            tables[name] = Table(storage, load_config(storage), coordinator=connection.coordinator)
        return tables

    def observe(self, connection: Connection) -> dict[str, TableObservation]:
        tables = {}
        for name, table in self.open_tables(connection).items():
            with contextlib.suppress(AssertionError):
                wait(
                    lambda t=table: quiet(t),
                    QUIESCE_S,
                    f"table {name} to settle",
                )
            tables[name] = observe_table(table)
        return tables


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
    found: list[Violation] = []
    with connect(stack.settings(), require_kafka=True) as connection:
        run.create_tables(connection)  # 1.
        try:
            run.workload.start_spark()  # 2.
            run.workload.start_others()
            reader = _Reader(run.open_tables(connection))
            reader.start()
            try:
                run.play()  # 3.
                run.wait_for_progress()
            finally:
                reader.stop.set()
                reader.join(60)
        finally:
            stack.resume_all()
            found += run.workload.stop()  # 4.
        tables = run.observe(connection)  # 5.
    findings = Findings(stack, run.workload, run.uris, run.result)  # 6.
    ops = findings.ops_by_table()
    found += findings.check_stack() + check_run(ops, tables, reads=reader.reads)
    found += findings.check_events(tables) + findings.check_error_tables(ops)
    for name, service_ops in findings.service_ops_by_table().items():
        run.result.services.update(service_outcome(op) for op in service_ops)
        found += [
            Violation(v.name, f"table {name}: {v.detail}")
            for v in check_services(service_ops, tables[name])
        ]
    found += [Violation("read_raw_error", error) for error in reader.errors[:5]]
    run.result.seconds = time.monotonic() - started
    run.result.settle(found, home)
    return run.result
