"""Clients of the lakewarden services, for writers, table services and the CLI.

LockClient, LockLease                    leases from timeline-lock (plain threads)
LockRefusedError, LockServiceUnavailableError, LockTimeoutError
KafkaCoordinator                         the table Coordinator on timeline-lock (chosen by
                                         lakewarden.table.connect when Kafka is configured)
Heartbeat, Heartbeats, HeartbeatLostError  heartbeats for heartbeat-monitor (a thread each)
Liveness, LivenessUnavailableError       heartbeat-monitor's verdicts, from its changelog
CancelClient, CancelReply               RFC-79 cancels through cancel-manager
CancelServiceUnavailableError
CommitClient, CommitRequest, CommitReply job commits by job-committer (waits, never retries)
JobCommitFailedError, CommitServiceUnavailableError, check_commit, CommitState
JobCommitterUnavailableError             Table.write found no job-committer running (nothing sent)
table_partition, lock_request            the lock wire contract timeline-lock shares with the
                                         clients (routing, request events)
"""

from lakewarden.clients._lock_wire import lock_request, table_partition
from lakewarden.clients.cancel import CancelClient, CancelReply, CancelServiceUnavailableError
from lakewarden.clients.clean import request_clean
from lakewarden.clients.commit import (
    AttemptManifest,
    CommitClient,
    CommitReply,
    CommitServiceUnavailableError,
    CommitState,
    JobCommitFailedError,
    check_commit,
)
from lakewarden.clients.committer_presence import JobCommitterUnavailableError
from lakewarden.clients.heartbeat import Heartbeat, HeartbeatLostError, Heartbeats
from lakewarden.clients.kafka_coordinator import KafkaCoordinator
from lakewarden.clients.liveness import Liveness, LivenessUnavailableError
from lakewarden.clients.lock import (
    LockClient,
    LockLease,
    LockRefusedError,
    LockServiceUnavailableError,
    LockTimeoutError,
)
from lakewarden.table.job_commit import (
    CommitRequest,  # the one job-commit value, sent by CommitClient
)

__all__ = [
    "CancelClient",
    "CancelReply",
    "CancelServiceUnavailableError",
    "request_clean",
    "AttemptManifest",
    "CommitClient",
    "CommitReply",
    "CommitRequest",
    "CommitServiceUnavailableError",
    "CommitState",
    "JobCommitFailedError",
    "JobCommitterUnavailableError",
    "check_commit",
    "lock_request",
    "table_partition",
    "Heartbeat",
    "HeartbeatLostError",
    "Heartbeats",
    "KafkaCoordinator",
    "Liveness",
    "LivenessUnavailableError",
    "LockClient",
    "LockLease",
    "LockRefusedError",
    "LockServiceUnavailableError",
    "LockTimeoutError",
]
