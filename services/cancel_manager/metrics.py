"""Prometheus metrics of cancel-manager (served on ``/metrics`` by the health endpoint)."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

RESULTS = Counter(
    "lakewarden_cancel_results_total",
    "CancelRequests answered, by kind (request, execute) and status (accepted, "
    "already_requested, aborted, already_aborted, refused_completed, refused_executing, "
    "not_cancellable, not_requested, unknown_instant, unknown_table, invalid_request, failed)",
    ["kind", "status"],
)
DURATION = Histogram(
    "lakewarden_cancel_duration_seconds",
    "From taking a CancelRequest up to its CancelResult being sent",
    buckets=_BUCKETS,
)
AUTO_ABORTS = Counter(
    "lakewarden_cancel_auto_aborts_total",
    "execute_cancel runs the service started by itself on a HeartbeatExpired of a "
    "cancel-requested plan, by status",
    ["status"],
)
TRANSITIONS = Counter(
    "lakewarden_cancel_manager_transitions_total",
    "TimelineTransition events published for entries the service appended",
    ["transition"],
)
