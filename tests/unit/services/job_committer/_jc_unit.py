"""A local table and a Spark-like driver for job-committer unit tests (no Kafka)."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lakewarden.api.connection import Connection
from lakewarden.api.table import Table
from lakewarden.commit import ManifestCommitter, new_job_id
from lakewarden.settings import Settings
from lakewarden.table.bucket import route
from lakewarden.table.config import META_FILE_NAME
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.files import BaseFileName, WriteToken, file_key
from lakewarden.table.plans import JobPlan
from lakewarden.table.stats import CommitStats, WorkloadProfile, WriteStat
from lakewarden.table.transaction import WriteTransaction
from lakewarden.table.writer import merge, stamped

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("v", pa.string())])
COORDINATOR = EmbeddedCoordinator()


def connection() -> Connection:
    """The worker's connection: the tests' embedded coordinator, storage by URI."""
    return Connection(Settings(), COORDINATOR)


def rows(*items: tuple[int, str, str]) -> pa.Table:
    ids, regions, values = zip(*items, strict=True)
    return pa.table({"id": list(ids), "region": list(regions), "v": list(values)}, schema=SCHEMA)


def as_set(table: pa.Table) -> set[tuple[object, ...]]:
    return {tuple(r.values()) for r in table.select(["id", "region", "v"]).to_pylist()}


def make_table(uri: str, *, publish_delta: bool = False) -> Table:
    return Table.create(
        uri,
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        coordinator=COORDINATOR,
        publish_delta=publish_delta,
    )


def delta_versions(root: Path) -> list[int]:
    """The versions of the table's published Delta log (``[0]``: only the create's)."""
    return sorted(int(p.stem) for p in (root / "_delta_log").glob("*.json"))


def data_files(table: Table) -> list[str]:
    return sorted(
        o.key
        for o in table.storage.list("")
        if o.key.endswith(".parquet") and not o.key.startswith(("_temporary/", ".lakewarden/"))
    )


@dataclass
class Job:
    """An opened instant with task attempts written and committed (inflight appended)."""

    table: Table
    txn: WriteTransaction
    job_id: str
    committer: ManifestCommitter
    accepted: tuple[str, ...] = ()
    stats: CommitStats = field(default_factory=lambda: CommitStats(operation="insert"))

    @property
    def instant(self) -> str:
        return self.txn.instant


def open_job(table: Table, *tasks: pa.Table, plan_job: str | None = None) -> Job:
    """``requested`` (plan naming the job), one task attempt per ``tasks`` item, ``inflight``."""
    job_id = new_job_id()
    committer = ManifestCommitter(table.storage, job_id)
    committer.setup_job()
    txn = WriteTransaction.begin(
        table.timeline_log,
        table.coordinator,
        table.table_id,
        operation="insert",
        actor="test-driver",
        plan=JobPlan(job_id=plan_job or job_id),
    )
    accepted, stats = [], []
    for task, data in enumerate(tasks):
        attempt = committer.task_attempt(task)
        attempt.setup()
        for group, incoming in route(data, table.config).items():
            merged = merge(
                "insert", None, stamped(incoming, txn.instant, table.config, "insert"), None
            )
            assert merged.table is not None
            name = BaseFileName(group.file_id, WriteToken(task, 0, 0), txn.instant).render()
            key = file_key(group.partition_path, name)
            out = merged.table.append_column(
                META_FILE_NAME, pa.repeat(pa.scalar(name), len(merged.table))
            )
            buffer = io.BytesIO()
            pq.write_table(
                out.select(table.config.file_schema.names).cast(table.config.file_schema), buffer
            )
            attempt.write_file(key, buffer.getvalue())
            stats.append(
                WriteStat(
                    file_group=group,
                    path=key,
                    base_instant=txn.instant,
                    num_records=len(merged.table),
                    num_inserts=len(merged.table),
                    size_bytes=len(buffer.getvalue()),
                )
            )
        attempt.commit()
        accepted.append(str(attempt.attempt_id))
    groups = tuple(dict.fromkeys(s.file_group for s in stats))
    txn.inflight(WorkloadProfile(operation="insert", file_groups=groups))
    commit_stats = CommitStats(operation="insert", write_stats=tuple(stats))
    return Job(table, txn, job_id, committer, tuple(accepted), commit_stats)
