"""Named fault points, and the one fault plan that arms them (tests only).

Production code calls ``point(name, **where)`` at a few moments a test wants to break: a
crash between two commit steps, a Spark task attempt failing after its task commit, a
service killed before it answers. Without a plan ``point`` returns at once: the module holds
no plan (``_source is None``) unless one was given, so a production process pays one global
lookup per point and nothing more; no option, argument or Spark UDF carries a test fault.

A plan is a list of ``Fault``\\ s, each naming a point, what must match there (``where``:
the point's keyword arguments, compared as text) and an action. It reaches a process in one
of two ways:

- ``LAKEWARDEN_FAULT_PLAN`` in its environment, read once at import: the plan as JSON
  (``FaultPlan.env()``; for a service process a test starts), or the path of a JSON file that
  is re-read whenever it changes (for long-lived processes a test cannot restart per fault,
  such as Spark's Python workers: the test session points the variable at a file before
  Spark starts, and each test writes its plan there);
- ``install(plan)`` in this process (``lakewarden.testing.faults.fault_plan`` does both).

Points (``where`` keys in brackets):

====================================  =========================================================
``commit.stage.start`` [stage]        a manifest-committer stage begins
``commit.stage.end`` [stage]          a manifest-committer stage finished its work
``commit_instant.step`` [step]        ``commit_instant`` enters a step (``CommitProgress``:
                                      ``check_instant``, ``job_commit``, ``check_statistics``,
                                      ``complete_instant``)
``job_committer.publish_result``      job-committer finished a commit, its answer not yet sent
``job_committer.publish_delta``       job-committer answered a commit, its Delta version not
                                      published yet
``spark.task.before_write``           a Spark task attempt starts writing [partition, attempt]
``spark.task.after_commit``           a Spark task attempt saved its manifest [partition,
                                      attempt] (on Spark's own Parquet writer: while writing)
``spark.task.after_log_append``       a merge-on-read task appended a log block [partition,
                                      attempt]
``spark.stream.after_batch_commit``   a streaming micro-batch's instant completed, Spark has
                                      not recorded the batch yet [batch]
====================================  =========================================================

Actions: ``raise`` (``InjectedFaultError``, retryable), ``crash`` (``SimulatedCrash``: a
``BaseException`` nothing handles, for in-process tests), ``kill`` (SIGKILL of the process,
as ``kill -9``), ``exit`` (``os._exit``: a worker that just dies), ``delay`` (sleep
``seconds``, then go on) and ``pause`` (wait until the file ``until`` exists, then go on; a
test that never creates it, or kills the process meanwhile, gets ``InjectedFaultError`` after
``seconds``, default 300). ``mark``: a file created when the fault fires, so a test waits for
the process to reach the point instead of guessing; with ``once`` the fault fires only when it
creates the mark (a restarted process, or the next attempt, goes past).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from lakewarden.errors import RetryableError

log = logging.getLogger("lakewarden.faults")

ENV_VAR = "LAKEWARDEN_FAULT_PLAN"
POINTS = frozenset(
    {
        "commit.stage.start",
        "commit.stage.end",
        "commit_instant.step",
        "job_committer.publish_result",
        "job_committer.publish_delta",
        "spark.task.before_write",
        "spark.task.after_commit",
        "spark.task.after_log_append",
        "spark.stream.after_batch_commit",
    }
)
Action = Literal["raise", "crash", "kill", "exit", "delay", "pause"]
# The exit status of a process an ``exit`` fault ends (recognisable in logs).
EXIT_STATUS = 57
_PAUSE_LIMIT_S = 300.0
_POLL_S = 0.02


class InjectedFaultError(RetryableError):
    """A failure a test's fault plan asked for."""


class SimulatedCrash(BaseException):
    """A process dying at this point.

    Not an ``Exception``: no stage, retry loop or ``except Exception`` handles it and no failure
    summary is written, exactly as after a real crash (a ``SIGKILL`` runs no handler either).
    Raised by a ``crash`` fault; tests also raise it from a ``FaultyStorage`` fault, a stage
    hook or a strategy, then check what the next process finds."""


class Fault(BaseModel):
    """One armed point: at ``point``, when the point's arguments match ``where``, do
    ``action`` (module doc)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    point: str
    action: Action
    where: dict[str, str] = Field(default_factory=dict)
    seconds: float = Field(default=0.0, ge=0)
    until: str | None = None
    mark: str | None = None
    once: bool = False

    @field_validator("where", mode="before")
    @classmethod
    def _as_text(cls, value: object) -> object:
        if isinstance(value, dict):
            return {str(k): str(v) for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _known(self) -> Fault:
        if self.point not in POINTS:
            raise ValueError(f"unknown fault point {self.point!r}; the points: {sorted(POINTS)}")
        if self.once and self.mark is None:
            raise ValueError("a fault that fires once needs a mark file")
        return self

    def matches(self, point: str, where: dict[str, object]) -> bool:
        return point == self.point and all(str(where.get(k)) == v for k, v in self.where.items())


class FaultPlan(BaseModel):
    """The faults a test arms, in the order they are checked (all that match fire)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    faults: tuple[Fault, ...] = ()

    def env(self) -> dict[str, str]:
        """The environment that gives a new process this plan."""
        return {ENV_VAR: self.model_dump_json()}

    def planned(self, prefix: str) -> bool:
        return any(f.point.startswith(prefix) for f in self.faults)


def point(name: str, **where: object) -> None:
    """Fault point ``name``: whatever the plan arms here happens; nothing without a plan.

    Raises: InjectedFaultError, SimulatedCrash (when the plan says so)."""
    if _source is None:
        return
    for fault in _source.plan().faults:
        if fault.matches(name, where):
            _fire(fault, name, where)


def planned(prefix: str) -> bool:
    """Whether the plan arms a point whose name starts with ``prefix`` (a caller that must
    add work to reach a point, such as a Spark UDF, adds it only then)."""
    return _source is not None and _source.plan().planned(prefix)


def install(plan: FaultPlan | None) -> Callable[[], None]:
    """Make ``plan`` this process's plan (None: no plan); returns what puts the one it
    replaces back."""
    global _source
    previous = _source
    _source = _Fixed(plan) if plan is not None else None

    def restore() -> None:
        global _source
        _source = previous

    return restore


def _fire(fault: Fault, name: str, where: dict[str, object]) -> None:
    if fault.mark is not None and not _mark(Path(fault.mark), exclusive=fault.once):
        return
    at = f"{name} {where}" if where else name
    log.warning("fault plan: %s at %s", fault.action, at)
    if fault.action == "raise":
        raise InjectedFaultError(f"injected failure at {at}")
    if fault.action == "crash":
        raise SimulatedCrash(f"crash at {at}")
    if fault.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)  # no cleanup at all, as kill -9
    if fault.action == "exit":
        os._exit(EXIT_STATUS)  # no cleanup, no reply: the process just dies
    if fault.action == "delay":
        time.sleep(fault.seconds)
    if fault.action == "pause":
        _pause(fault, at)


def _mark(path: Path, *, exclusive: bool) -> bool:
    """Create ``path``; False when ``exclusive`` and it existed already."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | (os.O_EXCL if exclusive else 0))
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as out:
        out.write(f"{os.getpid()}\n")
    return True


def _pause(fault: Fault, at: str) -> None:
    """Raises: InjectedFaultError (not released within the limit)."""
    limit = fault.seconds or _PAUSE_LIMIT_S
    deadline = time.monotonic() + limit
    until = Path(fault.until) if fault.until is not None else None
    while until is None or not until.exists():
        if time.monotonic() >= deadline:
            raise InjectedFaultError(f"paused at {at}, not released within {limit:g} s")
        time.sleep(_POLL_S)


class _Fixed:
    def __init__(self, plan: FaultPlan) -> None:
        self._plan = plan

    def plan(self) -> FaultPlan:
        return self._plan


class _File:
    """A plan file, re-read when it changes (a missing file is the empty plan)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._plan = FaultPlan()

    def plan(self) -> FaultPlan:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._seen, self._plan = None, FaultPlan()
            return self._plan
        seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if seen != self._seen:
            self._plan = FaultPlan.model_validate_json(self.path.read_bytes())
            self._seen = seen
        return self._plan


def _from_env() -> _Fixed | _File | None:
    value = os.environ.get(ENV_VAR, "").strip()
    if not value:
        return None
    if value.startswith("{"):
        return _Fixed(FaultPlan.model_validate(json.loads(value)))
    return _File(Path(value))


_source: _Fixed | _File | None = _from_env()
