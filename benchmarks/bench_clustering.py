"""Clustering (RFC-79's first table service) against a plain pyarrow rewrite, same run.

A table of one partition and 4 buckets receives Spark-like appends: 50 tasks, each writing
its share into an append group of every bucket, so the partition holds 200 small files
(``lakewarden.table.bucket.append_group``). ``schedule_clustering`` + ``run_table_service``
rewrite them into one file per bucket (claim, heartbeat, rewrite, job commit, ``completed``).
The baseline reads the same 200 files with ``pyarrow.parquet`` and writes one file per bucket
(goal: clustering at most 1.2x the baseline).

On Spark (one local[2] session, the machine has 2 cores): ``lakewarden.spark.run_table_service``
(one task per bucket through the manifest committer, the driver's claim, heartbeat and
``completed``) against plain Spark reading the same 200 files and writing one file per bucket
(``spark.read.parquet(...).coalesce(1).write.parquet`` per bucket). Same goal. The
CancelRequest -> CancelResult latency is ``python -m benchmarks cancel``.

Run alone with ``python -m benchmarks clustering [--quick]``.
"""

from __future__ import annotations

import io
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks._registry import BenchContext, Result, benchmark
from lakewarden.api.table import Table
from lakewarden.table.bucket import append_group, bucket_prefix, route
from lakewarden.table.files import BaseFileName, WriteToken, file_key
from lakewarden.table.merge import stamped
from lakewarden.table.stats import CommitStats, WorkloadProfile, WriteStat
from lakewarden.table.transaction import WriteTransaction

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("region", pa.string()),
        pa.field("ts", pa.int64()),
        pa.field("payload", pa.string()),
    ]
)
TASKS = 50
BUCKETS = 4


def _spark_like_append(table: Table, rows_per_task: int) -> int:
    """One instant of ``TASKS`` tasks, each writing an append group per bucket; returns the
    number of files written."""
    config = table.config
    txn = WriteTransaction.begin(
        table.timeline_log, table.coordinator, config.table_id, operation="insert", actor="b"
    )
    written: list[WriteStat] = []
    for task in range(TASKS):
        ids = range(task * rows_per_task, (task + 1) * rows_per_task)
        share = pa.table(
            {
                "id": list(ids),
                "region": ["eu"] * rows_per_task,
                "ts": list(ids),
                "payload": [f"p{i:010d}" for i in ids],
            },
            schema=SCHEMA,
        )
        for canonical, part in route(share, config).items():
            group = append_group(canonical, txn.instant, task)
            name = BaseFileName(group.file_id, WriteToken(task, 0, 0), txn.instant).render()
            key = file_key(group.partition_path, name)
            data = stamped(part, txn.instant, config, "insert")
            buffer = io.BytesIO()
            pq.write_table(config.stored_rows(data, name), buffer)
            table.storage.write_if_absent(key, buffer.getvalue())
            written.append(
                WriteStat(
                    file_group=group,
                    path=key,
                    base_instant=txn.instant,
                    num_records=len(part),
                    size_bytes=len(buffer.getvalue()),
                )
            )
    groups = tuple(w.file_group for w in written)
    txn.inflight(WorkloadProfile(operation="insert", file_groups=groups))
    txn.complete(CommitStats(operation="insert", write_stats=tuple(written)))
    return len(written)


def _pyarrow_rewrite(table: Table, out: Path) -> float:
    """Read every file of the snapshot and write one file per bucket, with pyarrow alone."""
    by_bucket: dict[str, list[str]] = {}
    for group, file_slice in table.snapshot().slices.items():
        by_bucket.setdefault(bucket_prefix(group.file_id) or "", []).extend(file_slice.paths)
    out.mkdir()
    start = time.perf_counter()
    for n, paths in enumerate(by_bucket.values()):
        local = [table.storage.local_path(p) for p in paths]
        data = pa.concat_tables([pq.read_table(p, partitioning=None) for p in local if p])
        pq.write_table(data, out / f"bucket-{n}.parquet")
    return time.perf_counter() - start


def _spark_rewrite(spark: Any, table: Table, out: Path) -> float:
    """Plain Spark: read each bucket's files and write them as one Parquet file."""
    by_bucket: dict[str, list[str]] = {}
    for group, file_slice in table.snapshot().slices.items():
        by_bucket.setdefault(bucket_prefix(group.file_id) or "", []).extend(file_slice.paths)
    start = time.perf_counter()
    for n, paths in enumerate(by_bucket.values()):
        local = [str(table.storage.local_path(p)) for p in paths]
        spark.read.parquet(*local).coalesce(1).write.parquet(str(out / f"bucket-{n}"))
    return time.perf_counter() - start


def measure_spark(rows_per_task: int, rounds: int) -> dict[str, Any]:
    """The Spark execution against plain Spark, interleaved, one session."""
    import lakewarden.spark
    from benchmarks.bench_spark import _session

    spark = _session()
    ours: list[float] = []
    theirs: list[float] = []
    try:
        for round_no in range(rounds):
            root = Path(tempfile.mkdtemp(prefix="lakewarden-bench-clustering-spark-"))
            try:
                table = _table(root)
                _spark_like_append(table, rows_per_task)
                if round_no % 2:
                    theirs.append(_spark_rewrite(spark, table, root / "plain"))
                start = time.perf_counter()
                instant = table.schedule_clustering()
                assert instant is not None
                run = lakewarden.spark.run_table_service(spark, table.uri, str(instant))
                ours.append(time.perf_counter() - start)
                assert str(run.outcome) == "completed"
                if not round_no % 2:
                    theirs.append(_spark_rewrite(spark, table, root / "plain"))
            finally:
                shutil.rmtree(root, ignore_errors=True)
    finally:
        spark.stop()
    return {"spark_clustering_s": min(ours), "plain_spark_s": min(theirs), "rounds": rounds}


def _table(root: Path) -> Table:
    return Table.create(
        str(root / "t"),
        name="t",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        buckets=BUCKETS,
    )


def measure(rows_per_task: int, rounds: int) -> dict[str, Any]:
    ours: list[float] = []
    theirs: list[float] = []
    files = 0
    for round_no in range(rounds):
        root = Path(tempfile.mkdtemp(prefix="lakewarden-bench-clustering-"))
        try:
            table = _table(root)
            files = _spark_like_append(table, rows_per_task)
            # Alternate which goes first, so neither always gets the warm page cache.
            if round_no % 2:
                theirs.append(_pyarrow_rewrite(table, root / "plain"))
            start = time.perf_counter()
            instant = table.schedule_clustering()
            assert instant is not None
            run = table.run_table_service(instant)
            ours.append(time.perf_counter() - start)
            assert str(run.outcome) == "completed"
            if not round_no % 2:
                theirs.append(_pyarrow_rewrite(table, root / "plain"))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return {
        "files": files,
        "rows": rows_per_task * TASKS,
        "clustering_s": min(ours),
        "pyarrow_s": min(theirs),
        "rounds": rounds,
    }


@benchmark("clustering", "RFC-79 clustering of 200 small files vs a pyarrow rewrite")
def bench_clustering(ctx: BenchContext) -> Iterable[Result]:
    n = measure(ctx.scale(20_000, 2_000), ctx.scale(4, 2))
    yield Result(
        benchmark="clustering",
        metric=f"clustering {n['files']} files ({n['rows']:,} rows) into {BUCKETS}, in-process",
        unit="s",
        value=n["clustering_s"],
        baseline=n["pyarrow_s"],
        baseline_label="pyarrow read + write of the same files into one file per bucket",
        goal=1.2,
        details=n,
    )
    spark = measure_spark(ctx.scale(20_000, 2_000), ctx.scale(3, 1))
    yield Result(
        benchmark="clustering",
        metric=f"clustering {n['files']} files ({n['rows']:,} rows) into {BUCKETS}, on Spark",
        unit="s",
        value=spark["spark_clustering_s"],
        baseline=spark["plain_spark_s"],
        baseline_label="plain Spark read + write of the same files into one file per bucket",
        goal=1.2,
        details=spark,
    )
