"""A realistic sample record of every event, for the demo, round-trip tests and benchmarks.

``sample_events(table_id=...)`` returns ``{event name: record}``; a test fails if an event of
``schemas/`` has no sample here, so new events get one. Apart from ``envelope.event_time``
(epoch ms, as ``new_envelope`` writes it) each record equals what decoding it gives back.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from lakewarden.events.codec import EventCodec
from lakewarden.events.envelope import make_event

_INSTANT = "20250314092653589"


def _fields(table_id: str) -> dict[str, dict[str, Any]]:
    stats = {"files_added": 12, "bytes_added": 48_213_504, "records": 1_000_000}
    return {
        "LockRequest": {
            "request_id": "req-7f3a",
            "kind": "acquire",
            "owner": "spark-driver-1",
            "ttl_ms": 30_000,
            "token": None,
            "reply_topic": "lakewarden.lock.replies",
            "reply_partition": 3,
            "reply_key": "lock-client-5d1c",
            "acquire_id": None,
            "lease_expires_ms": None,
        },
        "LockReply": {
            "request_id": "req-7f3a",
            "owner": "spark-driver-1",
            "status": "granted",
            "token": 42,
            "lease_expires_ms": 1_741_944_443_589,
            "reason": None,
            "queue_position": None,
        },
        "Heartbeat": {
            "instant": _INSTANT,
            "owner": "spark-driver-1",
            "interval_ms": 10_000,
            "seq": 7,
            "kind": "beat",
            "tolerable_misses": 3,
        },
        "HeartbeatExpired": {
            "instant": _INSTANT,
            "owner": "spark-driver-1",
            "last_seen_ms": 1_741_944_413_589,
            "detected_ms": 1_741_944_443_600,
            "tolerance_ms": 30_000,
            "frontier_ms": 1_741_944_443_595,
        },
        "LivenessRecord": {
            "instant": _INSTANT,
            "status": "dead",
            "owner": "spark-driver-1",
            "partition": 3,
            "last_seen_ms": 1_741_944_413_589,
            "tolerance_ms": 30_000,
            "since_ms": 1_741_944_443_595,
        },
        "TimelineTransition": {
            "seq": 118,
            "instant": _INSTANT,
            "action": "commit",
            "transition": "completed",
            "actor": "job-committer-0",
            "lock_token": 42,
            "wall_time": datetime(2025, 3, 14, 9, 26, 54, tzinfo=UTC),
            "payload": json.dumps({"write_stats": stats}),
        },
        "TaskManifest": {
            "job_id": "job-20250314-0007",
            "task_id": "task-00012",
            "task_attempt_id": "attempt_20250314_0007_m_000012_1",
            "instant": _INSTANT,
            "manifest_path": "_temporary/manifest_job-20250314-0007/00/manifests/task-00012.json",
            "file_count": 1,
            "total_bytes": 12_582_912,
            "table_uri": "s3://lake/trips",
            "manifest_sha256": "9f2c" * 16,
            "manifest_size": 1_187,
            "manifest": {
                "type": "org.apache.hadoop.mapreduce.lib.output.committer.manifest.files"
                ".TaskManifest/1",
                "version": 1,
                "job_attempt_number": 0,
                "task_attempt_dir": "_temporary/manifest_job-20250314-0007/00/tasks/"
                "attempt_20250314_0007_m_000012_1/",
                "files": [
                    {
                        "source": "city=sf/f1_0-12-1_20250314092654123.parquet",
                        "destination": "city=sf/f1_0-12-1_20250314092654123.parquet",
                        "size": 12_582_912,
                        "etag": "b1946ac92492d2347c6235b4d2611184-2",
                        "upload": {
                            "bucket": "lake",
                            "destination_key": "trips/city=sf/f1_0-12-1_20250314092654123.parquet",
                            "upload_id": "2~f9a8",
                            "etags": ["5d41402abc4b2a76b9719d911017c592"] * 2,
                            "length": 12_582_912,
                        },
                    }
                ],
                "directories": [{"dir": "city=sf", "type": 0, "level": 1}],
                "extra_data": {"instant": _INSTANT, "operation": "insert"},
                "iostatistics": {
                    "counters": {"op_upload_part": 2},
                    "gauges": {},
                    "minimums": {"op_upload_part.min": 41.5},
                    "maximums": {"op_upload_part.max": 58.25},
                    "meanstatistics": {"op_upload_part.mean": {"samples": 2, "sum": 99.75}},
                },
            },
        },
        "JobCommitRequest": {
            "instant": _INSTANT,
            "job_id": "job-20250314-0007",
            "job_attempt": 0,
            "accepted_task_attempt_ids": [
                "attempt_20250314_0007_m_000011_0",
                "attempt_20250314_0007_m_000012_1",
            ],
            "manifest_dir": "_temporary/manifest_job-20250314-0007/00/manifests",
            "lock_token": 42,
            "metadata": json.dumps({"streaming_batch_id": 17}),
            "table_uri": "s3://lake/trips",
            "commit_stats": json.dumps({"operation": "upsert", "write_stats": stats}),
            "committer_options": {"threads": 64, "validate_output": True, "cleanup": None},
        },
        "JobCommitResult": {
            "instant": _INSTANT,
            "job_id": "job-20250314-0007",
            "status": "committed",
            "reason": None,
            "failed_stage": None,
            "stats": json.dumps(stats),
            "error_type": None,
            "recorded": False,
            "summary_key": ".lakewarden/jobs/job-20250314-0007/_SUCCESS",
        },
        "ErrorRecord": {
            "uid": "0b4f5a3e-2f11-4c1e-9d38-5d1c2a7e9b10",
            "ts": "1741944414",
            "schema": '{"type":"record","name":"trip","fields":[{"name":"fare","type":"double"}]}',
            "record": '{"fare": "twelve"}',
            "message": "ValueError: could not convert string to float: 'twelve'",
            "context": {"commitTime": _INSTANT, "partitionPath": "city=paris", "recordKey": "t-81"},
        },
        "CancelRequest": {
            "request_id": "cancel-5",
            "instant": "20250314080000000",
            "kind": "request",
            "requester": "cleaner-1",
            "reason": "cancellation_policy: older than 2h",
            "table_uri": "s3://lake/orders",
        },
        "CleanRequest": {
            "table_uri": "s3://lake/orders",
            "policy": "keep-latest-commits=5",
            "delete_orphans": False,
            "requested_by": "lakewarden-cli",
        },
        "CancelResult": {
            "request_id": "cancel-5",
            "instant": "20250314080000000",
            "outcome": "cancel_requested",
            "reason": None,
            "status": "accepted",
            "error_type": None,
        },
        "DeadLetter": {
            "topic": "lakewarden.heartbeats",
            "partition": 2,
            "offset": 1_042,
            "key": table_id.encode(),
            "value": b"\x00not-avro",
            "reason": "bad_magic",
            "detail": "bad_magic: starts with 006e, expected c301",
            "error_type": "EventDecodeError",
            "consumer_group": "heartbeat-monitor",
        },
    }


def sample_events(
    *, table_id: str = "trips", producer_id: str = "demo", codec: EventCodec | None = None
) -> dict[str, dict[str, Any]]:
    """One valid record per event name, each with a fresh envelope for ``table_id``."""
    return {
        name: make_event(name, table_id=table_id, producer_id=producer_id, codec=codec, **fields)
        for name, fields in _fields(table_id).items()
    }
