"""The campaign's embedded mode: the same kind of run with no Kafka and no services.

Every workload process (writers, two table-service executors, two cleaners, two cancel
requesters, a reader: ``_schedule.make_embedded_plan``) opens the table with its own embedded
coordinator, whose table lock and liveness view end at the process. Nothing but the timeline
(the state machine, claim marks, fences) keeps them from undoing each other's work: the setting
in which a retried plan deleted a completed plan's files and a cancel aborted a live executor's
plan (issue 32, findings 1 and 2). Stalls armed at their destructive steps
(``FaultyStorage.before`` on ``delete``, ``write_if_absent`` and ``read``) hold a process
between a check and the step it licensed while the others move on.

A run (:func:`run_embedded`): create the tables, start every process, play the kills and pauses,
stop the processes, read everything back and check it with the campaign's checkers, plus the
reader's and the cleaners' (``_checkers.check_reader``, ``check_cleaners``). Unlike the Kafka
mode, a killed writer's instant may stay pending (nothing positively says a writer of another
process died), so ``pending_left_behind`` is not checked; files of rolled-back instants are
checked after one last clean (the Kafka mode waits for its cleaner service instead).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _checkers import Violation, check_cleaners, check_reader, check_run
from _observe import observe_table
from _results import Findings, RunResult, service_outcome
from _runner import _Reader, _Run
from _schedule import RunPlan
from _service_checkers import check_services, service_ops_from_history

from lakewarden.api.connection import connect
from lakewarden.settings import Settings

__all__ = ["EMBEDDED_ENV", "EmbeddedStack", "run_embedded"]

# Tight heartbeats: an executor's claim mark (its tolerance: interval x misses = 2 s) expires
# within a short run, so a stalled or paused executor is fenced by its rival.
EMBEDDED_ENV = {
    "LAKEWARDEN_HEARTBEAT__INTERVAL_S": "0.5",
    "LAKEWARDEN_HEARTBEAT__TOLERABLE_MISSES": "4",
    "LAKEWARDEN_LOG_LEVEL": "INFO",
}


class EmbeddedStack:
    """What ``_runner`` and ``_processes`` ask of a stack, with nothing to run: no services,
    no faults of its own, client settings without Kafka."""

    services: tuple[str, ...] = ()

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True)

    def up(self) -> None:
        pass

    def down(self) -> None:
        pass

    def resume_all(self) -> None:
        pass

    def running(self) -> set[str]:
        return set()

    def pids(self) -> set[int]:
        return set()

    def settings(self) -> Settings:
        return Settings(state_dir=self.state_dir)

    def client_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEWARDEN_")}
        env.update(EMBEDDED_ENV)
        env["LAKEWARDEN_STATE_DIR"] = str(self.state_dir)
        return env


def _count_faults(plan: RunPlan, result: RunResult) -> None:
    for process in plan.writers:
        for fault in process.storage_faults:
            name = f"stall_{fault.op}" if fault.kind == "stall" else f"storage_{fault.kind}"
            result.faults[name] += 1


def run_embedded(stack: EmbeddedStack, plan: RunPlan, home: Path) -> RunResult:
    """Run ``plan`` (``make_embedded_plan``) with its files under ``home``; the result lists
    every violation found."""
    started = time.monotonic()
    home.mkdir(parents=True, exist_ok=True)
    (home / "plan.json").write_text(json.dumps(plan.to_json(), indent=1))
    run = _Run(stack, plan, home)  # type: ignore[arg-type]
    _count_faults(plan, run.result)
    found: list[Violation] = []
    with connect(stack.settings()) as connection:
        run.create_tables(connection)
        try:
            run.workload.start_others()
            reader = _Reader(run.open_tables(connection))
            reader.start()
            try:
                run.play()
                run.wait_for_progress()
            finally:
                reader.stop.set()
                reader.join(60)
        finally:
            found += run.workload.stop()
        tables = {name: _settle(t) for name, t in run.open_tables(connection).items()}
    findings = Findings(stack, run.workload, run.uris, run.result)  # type: ignore[arg-type]
    ops = findings.ops_by_table()
    found += check_run(ops, tables, reads=reader.reads, settled=False)
    for name, service_ops in findings.service_ops_by_table().items():
        run.result.services.update(service_outcome(op) for op in service_ops)
        found += [
            Violation(v.name, f"table {name}: {v.detail}")
            for v in check_services(service_ops, tables[name])
        ]
    found += [Violation("read_raw_error", error) for error in reader.errors[:5]]
    found += _check_actors(run, ops, run.result.services)
    run.result.seconds = time.monotonic() - started
    run.result.settle(found, home)
    return run.result


def _settle(table: Any) -> Any:
    """One last clean with every process stopped, then the observation: a write that gave
    its instant up leaves its files to the cleaner (``rolled_back`` first, then its files are
    garbage), as the Kafka mode waits for its cleaner service to settle."""
    from lakewarden.table.clean.policy import CleanPolicy

    table.clean(CleanPolicy(retention_window_s=0.0))
    return observe_table(table)


def _check_actors(run: _Run, ops: dict[str, Any], counts: Counter[str]) -> list[Violation]:
    """The reader's reads and the cleaners' cleans (counted into ``counts``)."""
    found: list[Violation] = []
    clean_lines: list[dict[str, Any]] = []
    for process, _, lines in run.workload.all_histories():
        table = process.plan.table
        if process.plan.role == "reader":
            counts.update(
                "read:ok" if line["phase"] == "read" else f"read:{line['error']}"
                for line in lines
                if line.get("phase") in ("read", "read_error")
            )
            found += [
                Violation(v.name, f"table {table}: {v.detail}")
                for v in check_reader(ops.get(table, []), lines)
            ]
        elif process.plan.role == "cleaner":
            clean_lines += lines
            counts.update(
                service_outcome(op) for op in service_ops_from_history(process.plan.name, lines)
            )
    found += check_cleaners(clean_lines)
    return found
