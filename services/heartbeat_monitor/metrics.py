"""Prometheus metrics of heartbeat-monitor (served on ``/metrics`` by the health endpoint)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# Detection lag is how long after the tolerance ran out a death was declared: ticks make it
# a fraction of a second; seconds mean the monitor is behind.
_LAG_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30)

BEATS = Counter(
    "lakewarden_heartbeat_beats_total",
    "Heartbeat messages consumed, by kind (beat, final, tick)",
    ["kind"],
)
INSTANTS = Gauge(
    "lakewarden_heartbeat_instants",
    "Instants this instance tracks, by status (alive, dead, ended)",
    ["status"],
)
EXPIRIES = Counter(
    "lakewarden_heartbeat_expiries_total", "Instants declared dead (HeartbeatExpired published)"
)
DETECTION_LAG = Histogram(
    "lakewarden_heartbeat_detection_lag_seconds",
    "Monitor clock at the verdict minus (last beat's broker time + tolerance)",
    buckets=_LAG_BUCKETS,
)
FORGOTTEN = Counter(
    "lakewarden_heartbeat_forgotten_total",
    "Instant records deleted (terminal timeline transition, or the forget window passed)",
)
MIGRATED = Counter(
    "lakewarden_heartbeat_liveness_migrated_total",
    "Liveness records of the JSON format before the schema, rewritten in Avro on recovery",
)
TERMINAL = Counter(
    "lakewarden_heartbeat_terminal_transitions_total",
    "Terminal timeline transitions seen (completed, aborted, rolled_back)",
)
ZOMBIE_BEATS = Counter(
    "lakewarden_heartbeat_zombie_beats_total",
    "Beats of instants already declared dead (ignored: a dead instant stays dead)",
)
CONSUMER_LAG = Gauge(
    "lakewarden_heartbeat_consumer_lag_seconds",
    "Monitor clock minus the broker time of the last heartbeat message consumed",
)
IN_GRACE = Gauge(
    "lakewarden_heartbeat_partitions_in_grace",
    "Partitions where no death is declared yet (after a start or a rebalance)",
)
CREATE_TIME = Counter(
    "lakewarden_heartbeat_create_time_messages_total",
    "Heartbeats stamped by their producer, not the broker (judged by the monitor's clock "
    "instead); the topic should use message.timestamp.type=LogAppendTime",
)
