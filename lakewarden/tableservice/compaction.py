"""Compaction: merge a merge-on-read file slice's log blocks into a new base file.

A compaction plan (``CompactionStrategy.plan``) names the slices that have log files (at
least ``min_log_files`` committed log statistics each), leaving alone file groups that pending
plans cover. Its executor reads every named slice as it was when the plan was scheduled
(``RewriteJob.base``: the snapshot as of the plan's ``requested`` entry) with
``lakewarden.table.mor.read_slice``, i.e. the base file merged with exactly the log blocks the
completed deltacommits' statistics name, and writes the result as the new base file of the file
group at the compaction instant. A slice that the merge leaves empty is replaced instead.

Compaction never changes a read result: the new slice holds what the old one read as. The
one exception is opt-in: a plan scheduled with ``bad_records="error-table"`` sets aside, in
the table's error table with the compaction instant, the merged records the table's schema
cannot hold (a value written under an earlier schema), instead of failing
(``lakewarden.tableservice.unfit`` says which cases may be diverted and which always fail).

Races (RFC-79, ``lakewarden.table.conflicts``): by default a compaction plan is
non-cancellable, as in Hudi; while it is pending, an ingestion that touches one of its file
groups cannot complete (``PendingPlanConflict``; it retries after the compaction). Scheduled
with ``cancellable=True``, ingestion takes precedence: the ingestion requests the plan's
cancellation and the plan ends aborted. Either way a compaction that would complete after an
overlapping ingestion completed is refused (``OverlappingCommitConflict``), so its stale input
never replaces newer log blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Literal, get_args

from lakewarden.table.config import META_FILE_NAME
from lakewarden.table.instant import Action
from lakewarden.table.plans import PlannedSlice, ServicePlan
from lakewarden.tableservice.errors import InvalidPlanOptionsError
from lakewarden.tableservice.strategy import (
    FileGroupStrategy,
    PlanningInput,
    RewriteJob,
    RewriteUnit,
    UnitResult,
    register_strategy,
)
from lakewarden.tableservice.unfit import compact_slice

__all__ = [
    "COMPACTION_BAD_RECORDS",
    "COMPACTION_STRATEGY",
    "CompactionBadRecords",
    "CompactionStrategy",
]

COMPACTION_STRATEGY = "compaction.merge_logs"
CompactionBadRecords = Literal["fail", "error-table"]
COMPACTION_BAD_RECORDS: tuple[str, ...] = get_args(CompactionBadRecords)


class CompactionStrategy(FileGroupStrategy):
    """Plans and executes compaction (module docstring). ``partitions`` limits planning to
    those partition paths, ``max_file_groups`` caps one plan, ``min_log_files`` is how many
    committed log statistics a slice needs to be worth compacting, ``bad_records`` what
    becomes of a merged record the table's schema cannot hold (``fail``, the default, or
    ``error-table``; recorded in the plan)."""

    name: ClassVar[str] = COMPACTION_STRATEGY
    action: ClassVar[Action] = Action.COMPACTION
    operation: ClassVar[str] = "compaction"

    def __init__(
        self,
        *,
        partitions: Sequence[str] | None = None,
        max_file_groups: int | None = None,
        min_log_files: int = 1,
        max_threads: int = 8,
        bad_records: CompactionBadRecords = "fail",
    ) -> None:
        self.partitions = frozenset(partitions) if partitions is not None else None
        self.max_file_groups = max_file_groups
        self.min_log_files = min_log_files
        self.max_threads = max_threads
        self.bad_records = bad_records

    @classmethod
    def from_plan(cls, plan: ServicePlan) -> CompactionStrategy:
        return cls(bad_records=plan.bad_records)

    def plan(self, source: PlanningInput) -> ServicePlan | None:
        """Raises: InvalidPlanOptionsError (a bound below 1, an unknown ``bad_records``)."""
        if self.bad_records not in COMPACTION_BAD_RECORDS:
            raise InvalidPlanOptionsError(
                f"bad_records must be one of {', '.join(COMPACTION_BAD_RECORDS)}, got "
                f"{self.bad_records!r} (a compaction never drops records without keeping "
                "them, so there is no 'skip').",
                table=source.config.name,
            )
        for what, bound in (
            ("max_file_groups", self.max_file_groups),
            ("min_log_files", self.min_log_files),
        ):
            if bound is not None and bound < 1:
                raise InvalidPlanOptionsError(
                    f"{what} must be at least 1, got {bound}.", table=source.config.name
                )
        chosen = [
            s
            for _, s in sorted(source.snapshot.slices.items(), key=lambda kv: str(kv[0]))
            if len(s.log_files) >= self.min_log_files
            and s.file_group not in source.busy
            and (self.partitions is None or s.file_group.partition_path in self.partitions)
        ][: self.max_file_groups]
        if not chosen:
            return None
        return ServicePlan(
            file_groups=tuple(s.file_group for s in chosen),
            strategy=self.name,
            input_slices=tuple(
                PlannedSlice(file_group=s.file_group, base_instant=s.base_instant, paths=s.paths)
                for s in chosen
            ),
            bad_records=self.bad_records,
        )

    def units(self, plan: ServicePlan) -> list[RewriteUnit]:
        """One unit per planned slice: its file group gets the merged base file."""
        return [RewriteUnit(target=s.file_group, slices=(s,)) for s in plan.input_slices]

    def rewrite_unit(self, job: RewriteJob, unit: RewriteUnit, *, task: int) -> UnitResult:
        """Raises: MissingCommittedBlockError, UnwritableRecordsError,
        UndivertibleRecordsError, StorageError."""
        file_slice = job.base.slices.get(unit.target)
        if file_slice is None:  # gone from the plan's snapshot: nothing to compact
            return UnitResult(write_stat=None)
        compacted = compact_slice(job, file_slice, task=task)
        if len(compacted.records) == 0:  # the merge left nothing: the group leaves the snapshot
            return UnitResult(write_stat=None, replaced=(unit.target,), failed=compacted.failed)
        data = compacted.records.drop_columns([META_FILE_NAME])
        stat = job.output.write(unit.target, data, task=task)
        return UnitResult(write_stat=stat, failed=compacted.failed)


register_strategy(COMPACTION_STRATEGY, CompactionStrategy.from_plan)
