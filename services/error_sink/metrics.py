"""error-sink's Prometheus metrics (served by ``HealthServer`` on ``/metrics``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

FAILED_RECORDS = Counter(
    "lakewarden_error_sink_failed_records_total",
    "Failed records committed to an error table, per source table",
    ["table"],
)
COMMITS = Counter(
    "lakewarden_error_sink_commits_total",
    "Error-table instants committed, per error table",
    ["error_table"],
)
SOURCES = Counter(
    "lakewarden_error_sink_sources_total",
    "Main instants whose errors were settled, per how",
    ["result"],
)
DROPPED = Counter(
    "lakewarden_error_sink_dropped_total",
    "Failed records not committed, per reason (not_accepted: attempt the main instant did "
    "not accept; discarded: instant rolled back or aborted; late: key already settled; "
    "duplicate: already in the error table)",
    ["reason"],
)
BUFFERED = Gauge(
    "lakewarden_error_sink_buffered_records", "Failed records waiting for their instant"
)
CHECK_ERRORS = Counter(
    "lakewarden_error_sink_check_errors_total",
    "Storage checks or error-table commits that failed (retried on the next check)",
    ["step"],
)
CHECKS = Counter(
    "lakewarden_error_sink_checks_total",
    "Passes of the decide-and-commit check (one every check interval while the loop runs)",
)
STORAGE_READS = Counter(
    "lakewarden_error_sink_storage_reads_total",
    "Timeline reads that decided how a pending instant ended (events make most unnecessary)",
)
