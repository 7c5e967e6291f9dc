"""Clustering: rewrite the many small slices of a bucket into one base file.

Spark appends leave a bucket of a partition spread over its canonical file group and any
number of append groups (``lakewarden.table.bucket``); every query then opens all of them.
A clustering plan picks the buckets with more than one slice (and, with ``sort_by``, also
buckets of one slice, to sort them), names every input slice, and its executor writes, per
bucket, one new base file of the canonical group holding exactly the records the slices held
(concatenated, optionally sorted; ``_lw_commit_time`` is kept, so incremental reads still
date each record by the write that made it). ``completed`` replaces the append groups.

A clustering never changes a read result: the same records, in one file per bucket.

Left to compaction: merge-on-read slices with log files are not clustered (their log blocks
need the merge that compaction does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import pyarrow as pa

from lakewarden.table.bucket import bucket_prefix
from lakewarden.table.config import TableConfig
from lakewarden.table.instant import Action
from lakewarden.table.merge import stored
from lakewarden.table.plans import PlannedSlice, ServicePlan
from lakewarden.table.reader import read_data_file
from lakewarden.table.snapshot import FileSlice
from lakewarden.table.stats import FileGroupId
from lakewarden.tableservice.errors import InvalidPlanOptionsError
from lakewarden.tableservice.strategy import (
    FileGroupStrategy,
    PlanningInput,
    RewriteJob,
    RewriteUnit,
    UnitResult,
    register_strategy,
)

__all__ = ["CLUSTERING_STRATEGY", "ClusteringStrategy"]

CLUSTERING_STRATEGY = "clustering.bucket"
_CANONICAL_SUFFIX = "0000"  # bucket_file_id(b) == f"{b:08d}-0000"


class ClusteringStrategy(FileGroupStrategy):
    """Plans and executes bucket clustering (see the module docstring).

    ``partitions`` limits planning to those partition paths; ``max_file_groups`` caps the
    input file groups of one plan (whole buckets only); ``sort_by`` names columns to sort
    each rewritten bucket by."""

    name: ClassVar[str] = CLUSTERING_STRATEGY
    action: ClassVar[Action] = Action.CLUSTERING
    operation: ClassVar[str] = "clustering"

    def __init__(
        self,
        *,
        partitions: Sequence[str] | None = None,
        max_file_groups: int | None = None,
        sort_by: Sequence[str] = (),
        max_threads: int = 8,
    ) -> None:
        self.partitions = frozenset(partitions) if partitions is not None else None
        self.max_file_groups = max_file_groups
        self.sort_by = tuple(sort_by)
        self.max_threads = max_threads

    @classmethod
    def from_plan(cls, plan: ServicePlan) -> ClusteringStrategy:
        return cls(sort_by=plan.sort_by)

    # -- planning -------------------------------------------------------------------------------

    def plan(self, source: PlanningInput) -> ServicePlan | None:
        """Raises: InvalidPlanOptionsError (an unknown sort column, max_file_groups < 1)."""
        self._check(source.config)
        chosen: list[FileSlice] = []
        for slices in _buckets(source):
            if self.partitions is not None and slices[0].file_group.partition_path not in (
                self.partitions
            ):
                continue
            if len(slices) < 2 and not self.sort_by:
                continue
            if any(s.log_files or s.file_group in source.busy for s in slices):
                continue
            if self.max_file_groups is not None and len(chosen) + len(slices) > (
                self.max_file_groups
            ):
                break
            chosen.extend(slices)
        if not chosen:
            return None
        return ServicePlan(
            file_groups=tuple(s.file_group for s in chosen),
            strategy=self.name,
            input_slices=tuple(
                PlannedSlice(file_group=s.file_group, base_instant=s.base_instant, paths=s.paths)
                for s in chosen
            ),
            sort_by=self.sort_by,
        )

    def _check(self, config: TableConfig) -> None:
        unknown = [c for c in self.sort_by if c not in config.pa_schema.names]
        if unknown:
            raise InvalidPlanOptionsError(
                f"sort_by names columns {unknown} that table {config.name} does not have "
                f"(columns: {config.pa_schema.names}).",
                table=config.name,
            )
        if self.max_file_groups is not None and self.max_file_groups < 1:
            raise InvalidPlanOptionsError(
                f"max_file_groups must be at least 1, got {self.max_file_groups}.",
                table=config.name,
            )

    # -- execution ------------------------------------------------------------------------------

    def units(self, plan: ServicePlan) -> list[RewriteUnit]:
        """One unit per bucket: its slices, written to the bucket's canonical group."""
        return [
            RewriteUnit(target=canonical, slices=tuple(slices))
            for canonical, slices in _units(plan.input_slices)
        ]

    def rewrite_unit(self, job: RewriteJob, unit: RewriteUnit, *, task: int) -> UnitResult:
        data = self._records(job, unit.slices)
        stat = job.output.write(unit.target, data, task=task)
        return UnitResult(
            write_stat=stat,
            replaced=tuple(s.file_group for s in unit.slices if s.file_group != unit.target),
        )

    def _records(self, job: RewriteJob, slices: Sequence[PlannedSlice]) -> pa.Table:
        tables = [
            stored(
                read_data_file(job.storage, job.config, path, s.file_group.partition_path),
                job.config,
            )
            for s in slices
            for path in s.paths
        ]
        data = pa.concat_tables(tables)
        if self.sort_by:
            data = data.sort_by([(c, "ascending") for c in self.sort_by])
        return data


def _buckets(source: PlanningInput) -> list[list[FileSlice]]:
    """The snapshot's slices grouped by (partition, bucket), in a stable order; slices of file
    groups that belong to no bucket are left alone."""
    grouped: dict[tuple[str, str], list[FileSlice]] = {}
    for group, file_slice in source.snapshot.slices.items():
        prefix = bucket_prefix(group.file_id)
        if prefix is not None:
            grouped.setdefault((group.partition_path, prefix), []).append(file_slice)
    return [sorted(grouped[key], key=lambda s: s.file_group.file_id) for key in sorted(grouped)]


def _units(slices: Sequence[PlannedSlice]) -> list[tuple[FileGroupId, list[PlannedSlice]]]:
    """The plan's slices by bucket, each with the canonical group its records go to."""
    grouped: dict[FileGroupId, list[PlannedSlice]] = {}
    for s in slices:
        prefix = bucket_prefix(s.file_group.file_id) or ""
        canonical = FileGroupId(
            partition_path=s.file_group.partition_path, file_id=prefix + _CANONICAL_SUFFIX
        )
        grouped.setdefault(canonical, []).append(s)
    return sorted(grouped.items(), key=lambda kv: (kv[0].partition_path, kv[0].file_id))


register_strategy(CLUSTERING_STRATEGY, ClusteringStrategy.from_plan)
