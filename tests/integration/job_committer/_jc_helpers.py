"""What the job-committer tests share: a Spark-like driver that opens an instant, runs task
attempts through the manifest committer and builds the commit request, and topic readers."""

from __future__ import annotations

import io
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer, TopicPartition

from lakewarden.api.table import Table
from lakewarden.clients import CommitRequest
from lakewarden.commit import ManifestCommitter, new_job_id
from lakewarden.commit.stages import TaskCommitResult
from lakewarden.events import decode
from lakewarden.settings import Settings
from lakewarden.table.bucket import route
from lakewarden.table.config import META_FILE_NAME
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.files import BaseFileName, WriteToken, file_key
from lakewarden.table.instant import Transition
from lakewarden.table.plans import JobPlan
from lakewarden.table.stats import CommitStats, FileGroupId, WorkloadProfile, WriteStat
from lakewarden.table.transaction import WriteTransaction
from lakewarden.table.writer import merge, stamped

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("v", pa.string())])
MODULE = "lakewarden_services.job_committer"
LOCK_MODULE = "lakewarden_services.timeline_lock"


def isolated(settings: Settings) -> Settings:
    """``settings`` with a fresh topic prefix (own topics, groups, changelogs)."""
    kafka = settings.kafka.model_copy(update={"topic_prefix": f"jc{uuid.uuid4().hex[:8]}."})
    return settings.model_copy(update={"kafka": kafka})


def rows(*items: tuple[int, str, str]) -> pa.Table:
    ids, regions, values = zip(*items, strict=True) if items else ((), (), ())
    return pa.table({"id": list(ids), "region": list(regions), "v": list(values)}, schema=SCHEMA)


def as_set(table: pa.Table) -> set[tuple[Any, ...]]:
    return {tuple(r.values()) for r in table.select(["id", "region", "v"]).to_pylist()}


def make_table(uri: str, *, buckets: int = 1) -> Table:
    return Table.create(
        uri,
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        buckets=buckets,
        coordinator=EmbeddedCoordinator(),
    )


@dataclass
class Driver:
    """A Spark driver's side of a write, without Spark: ``requested`` naming the job, task
    attempts that write privately and save manifests, ``inflight``, then a commit request."""

    table: Table
    instant: str
    job_id: str
    committer: ManifestCommitter
    txn: WriteTransaction
    stats: dict[str, list[WriteStat]] = field(default_factory=dict)
    results: dict[str, TaskCommitResult] = field(default_factory=dict)  # task commits

    @classmethod
    def begin(cls, table: Table) -> Driver:
        job_id = new_job_id()
        committer = ManifestCommitter(table.storage, job_id)
        committer.setup_job()
        txn = WriteTransaction.begin(
            table.timeline_log,
            table.coordinator,
            table.table_id,
            operation="insert",
            actor="test-driver",
            plan=JobPlan(job_id=job_id),
        )
        return cls(table, txn.instant, job_id, committer, txn)

    def task(
        self,
        task: int,
        data: pa.Table,
        *,
        attempt: int = 0,
        tamper: Callable[[bytes], bytes] | None = None,
    ) -> str:
        """Run attempt ``attempt`` of task ``task`` writing ``data`` (one file per file
        group); returns its attempt id. ``tamper`` rewrites the saved manifest."""
        config = self.table.config
        handle = self.committer.task_attempt(task, attempt)
        handle.setup()
        stats = []
        for group, incoming in route(data, config).items():
            merged = merge("insert", None, stamped(incoming, self.instant, config, "insert"), None)
            assert merged.table is not None
            name = BaseFileName(group.file_id, WriteToken(task, 0, attempt), self.instant).render()
            key = file_key(group.partition_path, name)
            payload = _file_bytes(merged.table, name, self.table)
            handle.write_file(key, payload)
            stats.append(
                WriteStat(
                    file_group=group,
                    path=key,
                    base_instant=self.instant,
                    num_records=len(merged.table),
                    num_inserts=merged.inserts,
                    size_bytes=len(payload),
                )
            )
        self.results[str(handle.attempt_id)] = handle.commit()
        if tamper is not None:
            key = self.committer.layout.manifest_key(handle.attempt_id)
            self.table.storage.write(key, tamper(self.table.storage.read(key)))
        self.stats[str(handle.attempt_id)] = stats
        return str(handle.attempt_id)

    def commit_stats(self, accepted: list[str]) -> CommitStats:
        stats = [s for a in accepted for s in self.stats[a]]
        groups: dict[FileGroupId, None] = dict.fromkeys(s.file_group for s in stats)
        mine = self.txn.status()
        if mine is not None and mine.state is Transition.REQUESTED:
            self.txn.inflight(WorkloadProfile(operation="insert", file_groups=tuple(groups)))
        return CommitStats(
            operation="insert",
            write_stats=tuple(stats),
            job_id=self.job_id,
        )

    def request(self, accepted: list[str], **overrides: Any) -> CommitRequest:
        """``inflight``, then the request to commit the ``accepted`` attempts."""
        values: dict[str, Any] = {
            "table_uri": self.table.uri,
            "table_id": self.table.table_id,
            "instant": self.instant,
            "job_id": self.job_id,
            "accepted": accepted,
            "stats": self.commit_stats(accepted),
        }
        values.update(overrides)
        return CommitRequest(**values)


def _file_bytes(data: pa.Table, name: str, table: Table) -> bytes:
    schema = table.config.file_schema
    data = data.append_column(META_FILE_NAME, pa.repeat(pa.scalar(name), len(data)))
    buffer = io.BytesIO()
    pq.write_table(data.select(schema.names).cast(schema), buffer)
    return buffer.getvalue()


def data_files(table: Table) -> list[str]:
    """Every parquet file under the table root outside the reserved areas."""
    return sorted(
        o.key
        for o in table.storage.list("")
        if o.key.endswith(".parquet") and not o.key.startswith(("_temporary/", ".lakewarden/"))
    )


def read_topic(settings: Settings, topic: str) -> list[tuple[str, dict[str, Any]]]:
    """Every decodable event on ``topic`` (all partitions), from the beginning."""
    consumer = Consumer(
        settings.kafka.librdkafka_config(
            group_id=f"probe-{uuid.uuid4()}",
            enable_auto_commit=False,
            logger=logging.getLogger("probe"),
        )
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        events: list[tuple[str, dict[str, Any]]] = []
        for partition in metadata.partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            if high == 0:
                continue
            consumer.assign([TopicPartition(topic, partition, 0)])
            seen = 0
            while seen < high:
                msg = consumer.poll(5)
                assert msg is not None, f"{topic}[{partition}] ended early"
                seen = int(msg.offset() or 0) + 1
                decoded = decode(msg.value() or b"")
                events.append((decoded.name, decoded.record))
        return events
    finally:
        consumer.close()


def wait_for(check: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return check()
