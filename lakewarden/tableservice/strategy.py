"""The table-service interface: a strategy plans a rewrite and executes it.

The framework (scheduling, the claim, heartbeats, the rollback of earlier attempts, the
pre-commit decision, cancellation) is the same for every table service; a strategy supplies
only what differs:

- ``plan(PlanningInput)``: which file groups to rewrite, as a ``ServicePlan`` naming its
  input slices (``ServicePlan.input_paths()`` lists the files it reads), or None;
- ``rewrite(RewriteJob)``: read the plan's input slices and write the new files through the
  job's ``output`` (an ``OutputSink``), returning the write statistics (``completed`` replaces
  the old slices with them).

Clustering (``lakewarden.tableservice.clustering``) is the first strategy; merge-on-read
compaction plugs in the same way: subclass ``TableServiceStrategy`` with ``action =
Action.COMPACTION`` and a unique ``name``, and ``register_strategy`` it so that executors find
it from the plan's ``strategy`` field.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, Protocol

import pyarrow as pa

from lakewarden.storage import Storage
from lakewarden.table.config import TableConfig
from lakewarden.table.instant import Action
from lakewarden.table.plans import ServicePlan
from lakewarden.table.snapshot import Snapshot
from lakewarden.table.stats import CommitStats, FileGroupId, WriteStat
from lakewarden.tableservice.errors import UnknownStrategyError

__all__ = [
    "OutputSink",
    "PlanningInput",
    "RewriteJob",
    "TableServiceStrategy",
    "register_strategy",
    "strategy_for",
]


@dataclass(frozen=True)
class PlanningInput:
    """What a planner sees: the latest snapshot (as of ``snapshot.as_of``, the plan's
    ``last_completed_instant``) and the file groups pending plans already cover (a new plan
    must leave them alone: two overlapping plans cannot both complete)."""

    config: TableConfig
    snapshot: Snapshot
    busy: frozenset[FileGroupId]


class OutputSink(Protocol):
    """Where a rewrite puts its files: the executor's attempt (invisible until completed)."""

    def write(self, file_group: FileGroupId, data: pa.Table, *, task: int) -> WriteStat:
        """Write ``data`` (the file schema without ``_lw_file_name``) as the new base file of
        ``file_group``; ``task`` numbers the writer (distinct tasks, distinct names)."""
        ...


@dataclass(frozen=True)
class RewriteJob:
    """One execution of a plan: the plan, the snapshot its input is read from (as of the
    plan's ``requested`` entry) and where the output goes."""

    storage: Storage
    config: TableConfig
    instant: str
    plan: ServicePlan
    base: Snapshot
    output: OutputSink


class TableServiceStrategy(abc.ABC):
    """A table service: ``name`` is recorded in its plans, ``action`` is their action."""

    name: ClassVar[str]
    action: ClassVar[Action]

    @abc.abstractmethod
    def plan(self, source: PlanningInput) -> ServicePlan | None:
        """The plan for ``source`` (``strategy`` = ``self.name``), or None: nothing to do."""

    @abc.abstractmethod
    def rewrite(self, job: RewriteJob) -> CommitStats:
        """Read the input, write the output through ``job.output``, return the statistics
        (the written files, and the file groups that leave the snapshot)."""


_STRATEGIES: dict[str, Callable[[ServicePlan], TableServiceStrategy]] = {}


def register_strategy(name: str, factory: Callable[[ServicePlan], TableServiceStrategy]) -> None:
    """Make plans whose ``strategy`` is ``name`` executable: ``factory(plan)`` builds the
    strategy that rewrites it (from the options the plan recorded)."""
    _STRATEGIES[name] = factory


def strategy_for(plan: ServicePlan, *, table: str, instant: str) -> TableServiceStrategy:
    """The strategy that executes ``plan``.

    Raises: UnknownStrategyError."""
    factory = _STRATEGIES.get(plan.strategy or "")
    if factory is None:
        known = ", ".join(sorted(_STRATEGIES)) or "none"
        raise UnknownStrategyError(
            f"plan {instant} of table {table} names strategy {plan.strategy!r}, which this "
            f"process cannot execute (known: {known}). Help: import the module that registers "
            "it (lakewarden.tableservice.register_strategy).",
            table=table,
            instant=instant,
        )
    return factory(plan)
