"""Helpers of the table-service tests: rows, a Spark-like append into append groups, the
same table seen by another executor, and a strategy wrapper that runs a hook mid-rewrite."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

from lakewarden.api.table import Table
from lakewarden.table.bucket import append_group, route
from lakewarden.table.coordinator import Coordinator
from lakewarden.table.files import BaseFileName, WriteToken, file_key
from lakewarden.table.instant import Action
from lakewarden.table.merge import stamped
from lakewarden.table.plans import ServicePlan
from lakewarden.table.stats import CommitStats, WorkloadProfile, WriteStat
from lakewarden.table.transaction import WriteTransaction
from lakewarden.table.write_input import validate_input
from lakewarden.tableservice import (
    ClusteringStrategy,
    PlanningInput,
    RewriteJob,
    TableServiceStrategy,
    register_strategy,
)

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("region", pa.string()),
        pa.field("ts", pa.int64()),
        pa.field("v", pa.string()),
    ]
)


def rows(*records: tuple[int, str | None, int | None, str]) -> pa.Table:
    return pa.Table.from_pylist(
        [dict(zip(SCHEMA.names, r, strict=True)) for r in records], schema=SCHEMA
    )


def as_sorted(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.select(SCHEMA.names).to_pylist(), key=lambda r: (r["id"], r["ts"]))


def append(table: Table, *shares: pa.Table, complete: bool = True) -> WriteTransaction:
    """A plain Spark append: task ``n`` writes its share into the append group of every bucket
    it touches (one slice per task and bucket), completed directly (no cancel requests: the
    Spark driver path of another round)."""
    config = table.config
    txn = WriteTransaction.begin(
        table.timeline_log, table.coordinator, config.table_id, operation="insert", actor="spark"
    )
    written: list[WriteStat] = []
    for task, share in enumerate(shares):
        for canonical, part in route(validate_input(share, config, "insert"), config).items():
            group = append_group(canonical, txn.instant, task)
            name = BaseFileName(group.file_id, WriteToken(task, 0, 0), txn.instant).render()
            key = file_key(group.partition_path, name)
            records = stamped(part, txn.instant, config, "insert")
            buffer = io.BytesIO()
            pq.write_table(config.stored_rows(records, name), buffer)
            table.storage.write_if_absent(key, buffer.getvalue())
            written.append(
                WriteStat(
                    file_group=group,
                    path=key,
                    base_instant=txn.instant,
                    num_records=len(part),
                    num_inserts=len(part),
                    size_bytes=len(buffer.getvalue()),
                )
            )
    txn.inflight(
        WorkloadProfile(operation="insert", file_groups=tuple(w.file_group for w in written))
    )
    if complete:
        txn.complete(CommitStats(operation="insert", write_stats=tuple(written)))
    return txn


def fragmented(table: Table, tasks: int = 3) -> pa.Table:
    """Append ``tasks`` shares of rows in two regions: every bucket gets several slices.
    Returns everything appended."""
    shares = [
        rows(*[(t * 100 + i, "eu" if i % 2 else "us", i, f"v{t}.{i}") for i in range(8)])
        for t in range(tasks)
    ]
    append(table, *shares)
    return pa.concat_tables(shares)


def as_executor(table: Table, actor: str, coordinator: Coordinator | None = None) -> Table:
    """The same table opened by another executor (same process, unless ``coordinator``)."""
    return Table(
        table.storage, table.config, coordinator=coordinator or table.coordinator, actor=actor
    )


Hook = Callable[[RewriteJob], None]
_HOOKS: dict[str, Hook] = {}


class HookedClustering(TableServiceStrategy):
    """Clustering that calls the test's hook after writing its files (before pre-commit):
    another writer slips in, or the executor "crashes" (the hook raises)."""

    name: ClassVar[str] = "test.hooked-clustering"
    action: ClassVar[Action] = Action.CLUSTERING

    def __init__(self, plan: ServicePlan | None = None) -> None:
        self.inner = ClusteringStrategy()

    def plan(self, source: PlanningInput) -> ServicePlan | None:
        return self.inner.plan(source)

    def rewrite(self, job: RewriteJob) -> CommitStats:
        stats = self.inner.rewrite(job)
        hook = _HOOKS.get(job.instant)
        if hook is not None:
            hook(job)
        return stats


def hook(instant: str, fn: Hook) -> None:
    _HOOKS[instant] = fn


register_strategy(HookedClustering.name, HookedClustering)
