"""Tables: create, open, write, read, travel in time; the timeline and the coordinator.

The public surface of the table layer, re-exported here on purpose (everything else in the
package's modules is implementation and may change):

Table, read                              a table and the one-call read (``lakewarden.table.table``)
CommitResult, Operation                  what a write returns, what it may do
connect, Connection, load_coordinator,   the one factory of storage and coordinator from
load_storage, require_kafka,             settings (``lakewarden.table.connection``)
shared_connection, close_shared_connections
Coordinator, EmbeddedCoordinator, Lease, the table lock and liveness contract; the Kafka one is
Liveness                                 ``lakewarden.clients.KafkaCoordinator``
TableConfig, Action, Transition, Instant the table's config and the timeline's vocabulary
Timeline, TimelineState, InstantState    the timeline log and its folded state
Snapshot, CommitStats, FileGroupId,      what a snapshot and a commit are made of
WorkloadProfile, WriteStat
CleanPolicy, CleaningPolicy, CleanResult cleaning (``Table.clean``; ``lakewarden.table.clean``)
errors                                   NotATableError, TableAlreadyExistsError, ... (below)
"""

from lakewarden.table.clean import (
    CleaningPolicy,
    CleanPolicy,
    CleanResult,
    InstantCleanedError,
    InvalidCleanPolicyError,
)
from lakewarden.table.config import (
    InvalidTableConfigError,
    NotATableError,
    TableAlreadyExistsError,
    TableConfig,
    UnsupportedFormatVersionError,
)
from lakewarden.table.conflicts import (
    OverlappingCommitConflict,
    PendingPlanConflict,
    WriteConflictError,
)
from lakewarden.table.connection import (
    Connection,
    close_shared_connections,
    connect,
    load_coordinator,
    load_storage,
    require_kafka,
    shared_connection,
)
from lakewarden.table.coordinator import (
    Coordinator,
    EmbeddedCoordinator,
    Lease,
    LeaseLostError,
    Liveness,
    LockReentryError,
    LockTimeoutError,
)
from lakewarden.table.instant import Action, Instant, Transition
from lakewarden.table.reader import ColumnNotFoundError, UnsupportedSliceError
from lakewarden.table.snapshot import InstantNotCompletedError, Snapshot
from lakewarden.table.stats import CommitStats, FileGroupId, WorkloadProfile, WriteStat
from lakewarden.table.table import Table, read
from lakewarden.table.timeline import (
    ConcurrentAppendError,
    IllegalTransitionError,
    Timeline,
    TimelineCorruptError,
    TimelineGapError,
)
from lakewarden.table.timeline_state import InstantState, TimelineState
from lakewarden.table.writer import (
    CommitResult,
    InvalidRecordError,
    Operation,
    SchemaMismatchError,
)

__all__ = [
    "Action",
    "CleanPolicy",
    "CleanResult",
    "CleaningPolicy",
    "InstantCleanedError",
    "InvalidCleanPolicyError",
    "ColumnNotFoundError",
    "CommitResult",
    "CommitStats",
    "ConcurrentAppendError",
    "Connection",
    "Coordinator",
    "EmbeddedCoordinator",
    "FileGroupId",
    "IllegalTransitionError",
    "Instant",
    "InstantNotCompletedError",
    "InstantState",
    "InvalidRecordError",
    "InvalidTableConfigError",
    "Lease",
    "LeaseLostError",
    "Liveness",
    "LockReentryError",
    "LockTimeoutError",
    "NotATableError",
    "Operation",
    "OverlappingCommitConflict",
    "PendingPlanConflict",
    "SchemaMismatchError",
    "Snapshot",
    "Table",
    "TableAlreadyExistsError",
    "TableConfig",
    "Timeline",
    "TimelineCorruptError",
    "TimelineGapError",
    "TimelineState",
    "Transition",
    "UnsupportedFormatVersionError",
    "UnsupportedSliceError",
    "WorkloadProfile",
    "WriteConflictError",
    "WriteStat",
    "close_shared_connections",
    "connect",
    "load_coordinator",
    "load_storage",
    "read",
    "require_kafka",
    "shared_connection",
]
