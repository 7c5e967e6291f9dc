"""Prometheus metrics of the cleaner (served on ``/metrics`` by the health endpoint)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

CLEANS = Counter(
    "lakewarden_cleaner_cleans_total",
    "Cleans run, by outcome (cleaned: a clean instant completed; nothing: nothing to delete; "
    "failed: an error, the table is cleaned again later)",
    ["outcome"],
)
FILES_DELETED = Counter("lakewarden_cleaner_files_deleted_total", "Files deleted by cleans")
BYTES_DELETED = Counter("lakewarden_cleaner_bytes_deleted_total", "Bytes deleted by cleans")
UPLOADS_ABORTED = Counter(
    "lakewarden_cleaner_uploads_aborted_total", "Pending multipart uploads aborted by cleans"
)
ROLLBACKS = Counter(
    "lakewarden_cleaner_rollbacks_total", "Failed writes rolled back (executor dead)"
)
PLANS_CANCELLED = Counter(
    "lakewarden_cleaner_plans_cancelled_total",
    "Cancellable plans aborted past their cancellation policy (RFC-79 goal C)",
)
TABLES_OWNED = Gauge(
    "lakewarden_cleaner_tables_owned", "Tables in the partitions this instance owns"
)
LAG = Gauge(
    "lakewarden_cleaner_lag_seconds", "How long the oldest table waiting to be cleaned has waited"
)
QUEUED = Gauge("lakewarden_cleaner_tables_queued", "Tables waiting to be cleaned")
TRIGGERS = Counter(
    "lakewarden_cleaner_triggers_total",
    "Reasons to clean, by source (request, transition, expired, sweep, assigned: a partition "
    "gained; unknown: a table whose "
    "URI this instance has not learned yet, left to its owner's sweep)",
    ["source"],
)
DURATION = Histogram(
    "lakewarden_cleaner_clean_duration_seconds",
    "One table's clean, from taking it off the queue",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
PHASE = Histogram(
    "lakewarden_cleaner_phase_seconds",
    "Where a clean's time goes, by phase (queue_wait, lock_acquire, lock_release, announce, "
    "liveness, storage: see lakewarden_services.cleaner.phases)",
    ["phase"],
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)
