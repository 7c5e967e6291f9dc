"""Prometheus metrics of timeline-lock (served on ``/metrics`` by the health endpoint).

``requests(kind, status)`` and ``ended(how)`` are the labelled children of ``REQUESTS`` and
``ENDED``, resolved once per label set: ``.labels(...)`` validates and locks on every call,
which with the histograms is a noticeable share of a request's handling.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# Lock waits and holds range from milliseconds (uncontended) to minutes (long commits).
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)

REQUESTS = Counter(
    "lakewarden_lock_requests_total",
    "Lock requests applied, by kind and by the status answered",
    ["kind", "status"],
)
DUPLICATES = Counter(
    "lakewarden_lock_duplicate_requests_total",
    "Requests redelivered after a restart and skipped (already applied)",
)
GRANTS = Counter("lakewarden_lock_grants_total", "Leases granted")
WAIT = Histogram(
    "lakewarden_lock_wait_seconds",
    "Time from an acquire's arrival to its grant (0 when uncontended)",
    buckets=_BUCKETS,
)
ENDED = Counter(
    "lakewarden_lock_leases_ended_total",
    "Leases that ended, by how (released, expired, withdrawn)",
    ["how"],
)
EXPIRIES = Counter("lakewarden_lock_expiries_total", "Leases taken away because not renewed")
HOLD = Histogram("lakewarden_lock_hold_seconds", "How long leases were held", buckets=_BUCKETS)
QUEUE_LENGTH = Gauge(
    "lakewarden_lock_queue_length", "Acquires waiting, over every table this instance serves"
)
HELD_TABLES = Gauge("lakewarden_lock_held_tables", "Tables whose lock is held right now")
TABLES = Gauge("lakewarden_lock_tables", "Tables whose lock state this instance keeps")
EXPIRE_SENT = Counter(
    "lakewarden_lock_expire_requests_total", "Expire requests the timer sent for overdue leases"
)
REQUEST_DELAY = Histogram(
    "lakewarden_lock_request_delay_seconds",
    "From a request's Kafka timestamp (its producer's clock) to the handler taking it up",
    buckets=_BUCKETS,
)
CHANGELOG_WRITES = Counter(
    "lakewarden_lock_changelog_writes_total",
    "Changelog records written (one per changed table per changelog interval)",
)
CHANGELOG_PENDING = Gauge(
    "lakewarden_lock_changelog_pending_tables",
    "Tables whose lock changed since its last changelog record the broker acknowledged",
)


# The labelled children, by label values (a handful: kinds x statuses, three ways to end).
_REQUESTS_BY_LABELS: dict[tuple[str, str], Counter] = {}
_ENDED_BY_HOW: dict[str, Counter] = {}


def requests(kind: str, status: str) -> Counter:
    """``REQUESTS.labels(kind, status)``, resolved once."""
    child = _REQUESTS_BY_LABELS.get((kind, status))
    if child is None:
        child = _REQUESTS_BY_LABELS[kind, status] = REQUESTS.labels(kind, status)
    return child


def ended(how: str) -> Counter:
    """``ENDED.labels(how)``, resolved once."""
    child = _ENDED_BY_HOW.get(how)
    if child is None:
        child = _ENDED_BY_HOW[how] = ENDED.labels(how)
    return child
