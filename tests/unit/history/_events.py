"""Hand-built event sequences for the history tests: real records, round-tripped through the
codec so that they look exactly like what the reader hands the fold."""

from __future__ import annotations

import json
from typing import Any

from lakewarden.events import default_codec, make_event
from lakewarden.history import Recorded

TABLE = "0b5cf4d6-1a3e-4b7e-9a55-6f1c2d3e4f50"
OTHER = "7d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6"
T0 = 1_763_900_000_000  # epoch ms; every event time below is T0 + an offset
INSTANT = "20251123120000000"


def event(
    name: str,
    at: int,
    *,
    table: str = TABLE,
    producer: str = "test",
    broker: bool = False,
    **fields: Any,
) -> Recorded:
    """``name`` with ``fields``, created at ``T0 + at`` (also the broker time if ``broker``)."""
    record = make_event(name, table_id=table, producer_id=producer, **fields)
    record["envelope"]["event_time"] = T0 + at
    decoded = default_codec().decode(default_codec().encode(name, record))
    return Recorded(
        decoded.name, decoded.record, f"lakewarden.{name}", 0, at, T0 + at if broker else None
    )


def transition(
    seq: int,
    transition: str,
    at: int,
    *,
    actor: str = "writer-1",
    token: int | None = 7,
    instant: str = INSTANT,
    payload: dict[str, Any] | None = None,
    action: str = "commit",
) -> Recorded:
    return event(
        "TimelineTransition",
        at,
        seq=seq,
        instant=instant,
        action=action,
        transition=transition,
        actor=actor,
        lock_token=token,
        wall_time=T0 + at,
        payload=json.dumps(payload or {}),
    )


def lock(request_id: str, owner: str, token: int, asked: int, granted: int) -> list[Recorded]:
    """An acquire and its grant."""
    return [
        event(
            "LockRequest",
            asked,
            request_id=request_id,
            kind="acquire",
            owner=owner,
            ttl_ms=30_000,
            reply_topic="lakewarden.lock.replies",
        ),
        event(
            "LockReply",
            granted,
            producer="timeline-lock",
            request_id=request_id,
            owner=owner,
            status="granted",
            token=token,
            lease_expires_ms=T0 + granted + 30_000,
        ),
    ]


def beats(
    owner: str, seqs: list[int], *, every: int = 1000, start: int = 0, instant: str = INSTANT
) -> list[Recorded]:
    """Heartbeats with the given seqs, broker-stamped ``every`` ms apart by seq."""
    return [
        event(
            "Heartbeat",
            start + seq * every,
            broker=True,
            producer=owner,
            instant=instant,
            owner=owner,
            interval_ms=every,
            seq=seq,
            kind="beat",
            tolerable_misses=3,
        )
        for seq in seqs
    ]


def expired(owner: str, last_seen: int, detected: int, *, instant: str = INSTANT) -> Recorded:
    return event(
        "HeartbeatExpired",
        detected,
        producer="heartbeat-monitor-0",
        instant=instant,
        owner=owner,
        last_seen_ms=T0 + last_seen,
        detected_ms=T0 + detected,
        tolerance_ms=3000,
        frontier_ms=T0 + detected - 5,
    )


def manifest(attempt: str, task: str, at: int, *, files: int = 2) -> Recorded:
    return event(
        "TaskManifest",
        at,
        job_id="job-1",
        task_id=task,
        task_attempt_id=attempt,
        instant=INSTANT,
        manifest_path=f"_temporary/manifest_job-1/00/manifests/{attempt}.json",
        file_count=files,
        total_bytes=files * 1000,
    )


def job_request(at: int, accepted: list[str]) -> Recorded:
    return event(
        "JobCommitRequest",
        at,
        producer="spark-driver-1",
        instant=INSTANT,
        job_id="job-1",
        accepted_task_attempt_ids=accepted,
        manifest_dir="_temporary/manifest_job-1/00",
        lock_token=7,
    )


def job_result(at: int, status: str, **fields: Any) -> Recorded:
    return event(
        "JobCommitResult",
        at,
        producer="job-committer-0",
        instant=INSTANT,
        job_id="job-1",
        status=status,
        **fields,
    )
