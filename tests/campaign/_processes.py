"""The workload processes of one campaign run: Python writers, table-service executors and the
Spark writer, each a process group of its own, started, signalled and stopped here.

Each incarnation of a process writes its history to ``history/<name>.<incarnation>.jsonl`` and
its output to ``logs/<name>.<incarnation>.log`` under the run's folder; a process stops when
the run's stop file appears.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _checkers import Violation
from _schedule import RunPlan, WriterPlan
from _stack import CampaignStack

from lakewarden.devstack import processes

__all__ = ["REPO_ROOT", "WorkloadProcess", "Workload", "read_jsonl", "wait"]

SCRIPTS = {
    "writer": Path(__file__).with_name("_writer.py"),
    "executor": Path(__file__).with_name("_executor.py"),
    "spark": Path(__file__).with_name("_spark_writer.py"),
    "cleaner": Path(__file__).with_name("_actors.py"),
    "canceller": Path(__file__).with_name("_actors.py"),
    "reader": Path(__file__).with_name("_actors.py"),
}
REPO_ROOT = Path(__file__).resolve().parents[2]
WRITER_START_S = 120.0  # importing pyarrow and confluent-kafka on a loaded 2-core machine
WRITER_STOP_S = 120.0  # a write may wait 30 s for the lock, then 30 s more for a second try
# A Spark writer's session plus its first (warm-up) write: minutes on a loaded machine.
SPARK_READY_S = 420.0
GROUP_EXIT_S = 30.0
SPARK_EXTRA_STOP_S = 180.0  # a Spark writer still in a write when asked to stop


@dataclass
class WorkloadProcess:
    plan: WriterPlan
    uri: str
    incarnation: int = 0
    proc: subprocess.Popen[bytes] | None = None
    pids: list[int] = field(default_factory=list)
    killed: set[int] = field(default_factory=set)  # incarnations ended by SIGKILL

    def actor(self, incarnation: int) -> str:
        prefix = {
            "writer": "campaign-",
            "executor": "executor-",
            "cleaner": "cleaner-",
            "canceller": "canceller-",
            "reader": "reader-",
        }.get(self.plan.role, "spark-")
        return f"{prefix}{self.plan.name}-{incarnation}"


class Workload:
    """Every workload process of a run, by name."""

    def __init__(
        self, stack: CampaignStack, plan: RunPlan, home: Path, uris: dict[str, str]
    ) -> None:
        self.stack = stack
        self.home = home
        self.stop_file = home / "stop"
        self.by_name = {w.name: WorkloadProcess(w, uris[w.table]) for w in plan.writers}
        # Spark writers set bad rows aside into the error table when error-sink runs.
        self.error_table_on = "error-sink" in stack.services

    def __iter__(self) -> Any:
        return iter(self.by_name.values())

    def history(self, name: str, incarnation: int) -> list[dict[str, Any]]:
        return read_jsonl(self.home / "history" / f"{name}.{incarnation}.jsonl")

    def all_histories(self) -> list[tuple[WorkloadProcess, int, list[dict[str, Any]]]]:
        """(process, incarnation, its history lines) of every incarnation so far."""
        return [
            (writer, incarnation, self.history(writer.plan.name, incarnation))
            for writer in self
            for incarnation in range(1, writer.incarnation + 1)
        ]

    def start(self, writer: WorkloadProcess) -> None:
        writer.incarnation += 1
        history = self.home / "history" / f"{writer.plan.name}.{writer.incarnation}.jsonl"
        history.parent.mkdir(parents=True, exist_ok=True)
        spec = {
            "uri": writer.uri,
            "writer": writer.plan.name,
            "incarnation": writer.incarnation,
            "seed": writer.plan.seed,
            "role": writer.plan.role,
            "storage_faults": [vars(f) for f in writer.plan.storage_faults],
            "task_faults": [vars(f) for f in writer.plan.task_faults],
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

    def start_spark(self) -> None:
        """Spark writers first, and the run waits (``SPARK_READY_S`` at most) until each has
        its session and has made one tiny write (``ready``), so its writes happen inside the
        workload and under its faults instead of after it."""
        spark = [w for w in self if w.plan.role == "spark"]
        for writer in spark:
            self.start(writer)

        def ready() -> bool:
            self._check_alive(spark)
            return all(self._has_phase(w, "ready") for w in spark)

        with contextlib.suppress(AssertionError):
            wait(ready, SPARK_READY_S, "the Spark writers' sessions and first writes")

    def start_others(self) -> None:
        """Every other process, waiting (``WRITER_START_S``) until each has opened its table."""
        others = [w for w in self if w.plan.role != "spark"]
        for writer in others:
            self.start(writer)

        def started() -> bool:
            self._check_alive(list(self))
            return all(self._has_phase(w, "start") for w in others)

        wait(started, WRITER_START_S, "every writer to open its table")

    def _check_alive(self, writers: list[WorkloadProcess]) -> None:
        """Raises: AssertionError (a process exited while starting)."""
        for writer in writers:
            assert writer.proc is not None
            if writer.proc.poll() is not None:
                raise AssertionError(
                    f"writer {writer.plan.name} exited at start: see {self.home / 'logs'}"
                )

    def _has_phase(self, writer: WorkloadProcess, phase: str) -> bool:
        lines = self.history(writer.plan.name, writer.incarnation)
        return any(line.get("phase") == phase for line in lines)

    def kill_or_pause(self, name: str, kill: bool) -> bool:
        """SIGKILL or SIGSTOP of a process's group; False when it is not running."""
        writer = self.by_name[name]
        if writer.proc is None or writer.proc.poll() is not None:
            return False
        sig = signal.SIGKILL if kill else signal.SIGSTOP
        with contextlib.suppress(ProcessLookupError):
            os.killpg(writer.proc.pid, sig)
        if kill:
            writer.proc.wait()
            writer.killed.add(writer.incarnation)
        return True

    def resume(self, name: str) -> None:
        proc = self.by_name[name].proc
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGCONT)

    def stop(self) -> list[Violation]:
        """Ask every process to stop and wait for it; one that does not stop, or leaves a
        process of its group behind, is a violation."""
        found: list[Violation] = []
        self.stop_file.touch()
        deadline = time.monotonic() + WRITER_STOP_S
        for writer in self:
            assert writer.proc is not None
            extra = SPARK_EXTRA_STOP_S if writer.plan.role == "spark" else 0.0
            try:
                writer.proc.wait(timeout=max(1.0, deadline + extra - time.monotonic()))
            except subprocess.TimeoutExpired:
                found.append(
                    Violation("writer_hung", f"{writer.plan.name} still writing after the stop")
                )
                os.killpg(writer.proc.pid, signal.SIGKILL)
                writer.proc.wait()
                writer.killed.add(writer.incarnation)
        for writer in self:
            for pid in writer.pids:
                # A Spark writer's JVM shuts down after its Python driver exits: a grace.
                with contextlib.suppress(AssertionError):
                    wait(lambda p=pid: not processes.group_members(p), GROUP_EXIT_S, "exit")
                if processes.group_members(pid):
                    found.append(
                        Violation("process_left_behind", f"writer {writer.plan.name} pid {pid}")
                    )
        return found


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = []
    for text in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(json.JSONDecodeError):  # the line a SIGKILL cut short
            lines.append(json.loads(text))
    return lines


def wait(predicate: Any, timeout_s: float, what: str) -> None:
    from lakewarden.testing import wait_until

    wait_until(predicate, timeout_s, what)
