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

A strategy whose work splits into independent file groups subclasses ``FileGroupStrategy``
instead: it lists the plan's ``RewriteUnit``s (one output file group each, with the input
slices that go into it) and rewrites one unit at a time (``rewrite_unit``). The in-process
executor runs the units on a thread pool; the Spark executor (``lakewarden.spark.
run_table_service``) runs one Spark task per unit, so only such strategies run on Spark.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol

import pyarrow as pa

from lakewarden.storage import Storage
from lakewarden.table.config import TableConfig
from lakewarden.table.instant import Action
from lakewarden.table.plans import PlannedSlice, ServicePlan
from lakewarden.table.snapshot import Snapshot
from lakewarden.table.stats import CommitStats, FileGroupId, WriteStat
from lakewarden.tableservice.errors import UnknownStrategyError

if TYPE_CHECKING:
    from lakewarden.errortable.records import ErrorRow

__all__ = [
    "FileGroupStrategy",
    "OutputSink",
    "PlanningInput",
    "RewriteJob",
    "RewriteUnit",
    "TableServiceStrategy",
    "UnitResult",
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
    plan's ``requested`` entry), where the output goes, the executor attempt, and the records
    the rewrite set aside for the error table (``failed``: ``FileGroupStrategy.rewrite``
    gathers its units' there; the execution spools them before the pre-commit)."""

    storage: Storage
    config: TableConfig
    instant: str
    plan: ServicePlan
    base: Snapshot
    output: OutputSink
    attempt: int = 0
    failed: list[ErrorRow] = field(default_factory=list)


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


@dataclass(frozen=True)
class RewriteUnit:
    """One independent piece of a plan's rewrite (one executor task): the file group the
    output goes to and the input slices it is made of (pickled to Spark executors)."""

    target: FileGroupId
    slices: tuple[PlannedSlice, ...]


@dataclass(frozen=True)
class UnitResult:
    """What one unit wrote (its new base file, if the rewrite left records), the file
    groups that leave the snapshot with it, and the records it set aside for the error table
    instead of writing them (``lakewarden.tableservice.unfit``)."""

    write_stat: WriteStat | None
    replaced: tuple[FileGroupId, ...] = ()
    failed: tuple[ErrorRow, ...] = ()


class FileGroupStrategy(TableServiceStrategy):
    """A strategy whose rewrite is a set of independent units (module docstring).

    ``rewrite`` runs the units on up to ``max_threads`` threads, numbering each unit's writer
    by its position in ``units``; a distributed executor runs ``rewrite_unit`` per unit with
    the same numbers and merges the results with ``combine``."""

    operation: ClassVar[str]
    max_threads: int = 8

    @abc.abstractmethod
    def units(self, plan: ServicePlan) -> Sequence[RewriteUnit]:
        """The plan's units, in a stable order (a unit's position is its task number)."""

    @abc.abstractmethod
    def rewrite_unit(self, job: RewriteJob, unit: RewriteUnit, *, task: int) -> UnitResult:
        """Read ``unit``'s input slices (as of ``job.base``) and write its output through
        ``job.output`` with ``task`` as the writer's number."""

    def rewrite(self, job: RewriteJob) -> CommitStats:
        units = list(self.units(job.plan))
        if not units:
            return self.combine([])
        workers = max(1, min(self.max_threads, len(units)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"lw-{self.name}") as pool:
            results = list(
                pool.map(
                    lambda task: self.rewrite_unit(job, units[task], task=task), range(len(units))
                )
            )
        job.failed.extend(row for r in results for row in r.failed)
        return self.combine(results)

    def combine(self, results: Sequence[UnitResult]) -> CommitStats:
        """The plan's statistics from its units' results (``failed_records``: the records
        they set aside for the error table)."""
        return CommitStats(
            operation=self.operation,
            write_stats=tuple(r.write_stat for r in results if r.write_stat is not None),
            replaced_file_groups=tuple(g for r in results for g in r.replaced),
            failed_records=sum(len(r.failed) for r in results),
        )


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
