"""Arming the fault plan (``lakewarden.faults``) from a test.

In this process, and in the processes that read the plan file ``LAKEWARDEN_FAULT_PLAN``
names (Spark's Python workers, when the test session set the variable before Spark
started)::

    with fault_plan(Fault(point="spark.task.after_commit", action="raise",
                          where={"partition": 1, "attempt": 0})):
        df.write.format("lakewarden").save(uri)   # attempt 0 of task 1 fails, attempt 1 not

For a process the test starts, pass ``FaultPlan(faults=(...)).env()`` in its environment.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lakewarden.faults import ENV_VAR, Action, Fault, FaultPlan, install

__all__ = ["ENV_VAR", "Fault", "FaultPlan", "fault_plan", "first_attempt", "plan_file"]


def first_attempt(
    partition: int, *, action: Action = "raise", point: str = "spark.task.after_commit"
) -> Fault:
    """``action`` at ``point`` in attempt 0 of Spark partition ``partition``; Spark's retry,
    attempt 1, goes past (by default: attempt 0 fails after its task commit saved its
    manifest, the worst moment: all its files and its manifest exist)."""
    return Fault(point=point, action=action, where={"partition": partition, "attempt": 0})


def plan_file() -> Path | None:
    """The plan file the environment names, or None (unset, or a plan given inline)."""
    value = os.environ.get(ENV_VAR, "").strip()
    return Path(value) if value and not value.startswith("{") else None


@contextmanager
def fault_plan(*faults: Fault) -> Iterator[FaultPlan]:
    """Arm ``faults`` for the block: in this process, and in the plan file (when the
    environment names one) for the processes that read it; both are emptied afterwards."""
    plan = FaultPlan(faults=faults)
    path = plan_file()
    if path is not None:
        _write(path, plan)
    restore = install(plan)
    try:
        yield plan
    finally:
        restore()
        if path is not None:
            _write(path, FaultPlan())


def _write(path: Path, plan: FaultPlan) -> None:
    """Replace the file whole (a reader never sees half a plan)."""
    staged = path.with_name(f".{path.name}.{os.getpid()}")
    staged.write_text(plan.model_dump_json())
    staged.replace(path)
