"""Prometheus metrics of the publisher (served on ``/metrics`` by the health endpoint)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

SYNCS = Counter(
    "lakewarden_publisher_syncs_total",
    "Syncs run, by outcome (published: wrote versions; current: nothing to write; off: the "
    "table does not publish; failed: an error, the table is synced again later)",
    ["outcome"],
)
VERSIONS = Counter("lakewarden_publisher_versions_total", "Delta versions this instance wrote")
VERSION_LAG = Gauge(
    "lakewarden_publisher_version_lag",
    "Versions the last synced table's Delta log was behind its timeline after the sync",
)
TABLES_OWNED = Gauge(
    "lakewarden_publisher_tables_owned", "Tables in the partitions this instance owns"
)
LAG = Gauge(
    "lakewarden_publisher_lag_seconds",
    "How long the oldest table waiting to be published has waited",
)
QUEUED = Gauge("lakewarden_publisher_tables_queued", "Tables waiting to be published")
TRIGGERS = Counter(
    "lakewarden_publisher_triggers_total",
    "Reasons to publish, by source (transition, registration, sweep; unknown: a table whose "
    "URI this instance has not learned, left to its owner)",
    ["source"],
)
DURATION = Histogram(
    "lakewarden_publisher_sync_duration_seconds",
    "One table's sync, from taking it off the queue",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
