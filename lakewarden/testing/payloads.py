"""Timeline payloads shaped like a real table's, for tests and benchmarks of code that reads
many of them (replay's checker, its benchmark): each one differs from every other, as on a
table where every instant writes a file group of its own, or every micro-batch of a streaming
ingestion records its own job."""

from __future__ import annotations

from typing import Any

from lakewarden.table.plans import JobPlan
from lakewarden.table.stats import CommitStats, FileGroupId, MicroBatch, WorkloadProfile, WriteStat
from lakewarden.table.timeline_state import RequestedPayload

_QUERY, _RUN = "8d3c0a7e-1f6b-4a52-9e0d-2b7c5f1a4e93", "0b5e9f3a-6c2d-4e71-8a4f-3d9b1c7e2a60"
_CHECKPOINT = "s3://lake/checkpoints/orders"


def file_group_payloads(i: int, instant: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``inflight`` and ``completed`` payloads (as JSON values) of instant ``i`` writing
    a file group of its own."""
    group = FileGroupId(partition_path=f"day={i % 365}", file_id=f"{i:08d}-0000")
    stat = WriteStat(
        file_group=group,
        path=f"{group.partition_path}/{group.file_id}_0-1-0_{instant}.parquet",
        base_instant=instant,
        num_records=1_000 + i % 1_000,
        num_inserts=1_000 + i % 1_000,
        size_bytes=400_000 + i,
    )
    workload = WorkloadProfile(operation="insert", file_groups=(group,))
    stats = CommitStats(operation="insert", write_stats=(stat,))
    return workload.model_dump(mode="json"), stats.model_dump(mode="json")


def streaming_requested(i: int) -> dict[str, Any]:
    """The ``requested`` payload (a JSON value) of micro-batch ``i`` of a streaming ingestion:
    its own job and batch, so no two instants share it."""
    plan = JobPlan(
        job_id=f"job_{i:012d}_5f1f7b0e",
        batch=MicroBatch(query_id=_QUERY, run_id=_RUN, batch_id=i, checkpoint=_CHECKPOINT),
    )
    return RequestedPayload(operation="insert", plan=plan).model_dump(mode="json")


__all__ = ["file_group_payloads", "streaming_requested"]
