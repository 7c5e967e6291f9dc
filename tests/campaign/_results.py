"""What a campaign run found: its result (``RunResult``), and the checks that read the workload's
histories, the tables, the timeline topic, the error tables and the stack's health at its end.

Every check here hands what it collected to the pure checkers (``_checkers``,
``_service_checkers``, ``_event_checkers``), which share no code with what they check.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from _checkers import (
    KNOWN_ISSUES,
    Op,
    TableObservation,
    Violation,
    check_error_table,
    ops_from_history,
)
from _event_checkers import check_event_timeline
from _observe import error_rows, raw_entries, timeline_events
from _processes import Workload, wait
from _service_checkers import ServiceOp, service_ops_from_history
from _stack import CampaignStack

from lakewarden.storage import open_storage

__all__ = ["RunResult", "Findings", "service_outcome"]

ERROR_SINK_S = 60.0  # error-sink commits a completed write's bad rows within seconds
# A service rejoins its group some seconds after a broker restart (10-12 s measured here under
# load 30-50): not OK for longer than this bound is a violation, not a single 503.
HEALTH_BOUND_S = 60.0
# Spark task faults by the name the history records (``_spark_writer``): counted when the
# write carrying one starts.
SPARK_TASK_FAULTS = {
    "fail": "spark_task_fail",
    "exit": "spark_task_exit",
    "slow": "spark_task_slow",
}


@dataclass
class RunResult:
    seed: int
    on_s3: bool
    faults: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    spark: Counter[str] = field(default_factory=Counter)  # the Spark writer's writes by outcome
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
        spark = f"; spark writes {dict(sorted(self.spark.items()))}" if self.spark else ""
        services = f"; services {dict(sorted(self.services.items()))}" if self.services else ""
        events = f"; entries unannounced {self.unannounced}" if self.unannounced else ""
        return f"{head}; writes {writes}{spark}; faults {faults}{services}{events}"

    def settle(self, found: list[Violation], home: Path) -> None:
        """Sort ``found`` into violations and known issues; write ``result.json``."""
        self.violations = [v for v in found if v.name not in KNOWN_ISSUES]
        self.known = [v for v in found if v.name in KNOWN_ISSUES]
        (home / "result.json").write_text(
            json.dumps(
                {
                    "summary": self.summary(),
                    "violations": [str(v) for v in self.violations],
                    "known_issues": [str(v) for v in self.known],
                },
                indent=1,
            )
        )


class Findings:
    """Reads what the run left (histories, tables, topics, the stack) for the checkers."""

    def __init__(
        self, stack: CampaignStack, workload: Workload, uris: dict[str, str], result: RunResult
    ) -> None:
        self.stack = stack
        self.workload = workload
        self.uris = uris
        self.result = result

    def ops_by_table(self) -> dict[str, list[Op]]:
        """The writes of every Python and Spark writer incarnation, by table; counts the
        outcomes, the Spark writer's apart, and the Spark task faults that fired."""
        ops: dict[str, list[Op]] = {}
        for writer, incarnation, lines in self.workload.all_histories():
            if writer.plan.role not in ("writer", "spark"):
                continue
            found = ops_from_history(writer.plan.name, incarnation, lines)
            ops.setdefault(writer.plan.table, []).extend(found)
            self.result.outcomes.update(op.outcome for op in found)
            if writer.plan.role == "spark":
                self.result.spark.update(op.outcome for op in found)
                fired = [line["task_fault"] for line in lines if line.get("task_fault")]
                self.result.faults.update(SPARK_TASK_FAULTS[kind] for kind in fired)
        return ops

    def service_ops_by_table(self) -> dict[str, list[ServiceOp]]:
        ops: dict[str, list[ServiceOp]] = {}
        for writer, _, lines in self.workload.all_histories():
            if writer.plan.role in ("executor", "canceller"):
                found = service_ops_from_history(writer.plan.name, lines)
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
            for writer in self.workload
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
            storage = open_storage(self.uris[name], self.stack.settings())
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
                wait(
                    lambda u=uri, e=expected, s=settings: e <= {r["v"] for r in error_rows(u, s)},
                    ERROR_SINK_S,
                    f"error-sink to commit the bad rows of table {name}",
                )
            found += [
                Violation(v.name, f"table {name}: {v.detail}")
                for v in check_error_table(ops, error_rows(uri, settings))
            ]
        return found

    def check_stack(self) -> list[Violation]:
        found: list[Violation] = []
        unhealthy = self.stack.unhealthy()
        if unhealthy:
            found.append(Violation("stack_unhealthy", f"parts not healthy: {unhealthy}"))
        for health in self.stack.devstack.status():
            if health.kind == "service" and not (ok := _health_within(health.port))[0]:
                found.append(
                    Violation(
                        "service_unhealthy",
                        f"{health.name} /health is not OK after {HEALTH_BOUND_S:g} s: {ok[1]}",
                    )
                )
        return found


def service_outcome(op: ServiceOp) -> str:
    """``run:completed``, ``cancel:accepted``, ``schedule:fail``...: how steps ended."""
    if op.phase != "done":
        return f"{op.step}:{op.phase}"
    if op.step == "schedule":
        return f"schedule:{'none' if op.plan is None else op.outcome}"
    return f"{op.step}:{op.outcome}"


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
