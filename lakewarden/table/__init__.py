"""Tables: create, open, write, read, travel in time; the timeline and the coordinator.

The public surface of the table layer, re-exported here on purpose (everything else in the
package's modules is implementation and may change):

Table, read                              a table and the one-call read (``lakewarden.api.table``)
CommitResult, Operation                  what a write returns, what it may do
connect, Connection, load_coordinator,   the one factory of the coordinator from settings
require_kafka, shared_connection,        (``lakewarden.api.connection``; storage comes from
close_shared_connections                 ``lakewarden.storage.open_storage``)
Coordinator, EmbeddedCoordinator, Lease, the table lock and liveness contract; the Kafka one is
Liveness                                 ``lakewarden.clients.KafkaCoordinator``
TableLock, Heartbeating,                 the coordinator's roles, for code that needs only one
ExecutorLiveness, TimelineAudit
TableConfig, Action, Transition, Instant the table's config and the timeline's vocabulary
Timeline, TimelineState, InstantState    the timeline log and its folded state
Snapshot, CommitStats, FileGroupId,      what a snapshot and a commit are made of
WorkloadProfile, WriteStat
CleanPolicy, CleaningPolicy, CleanResult cleaning (``Table.clean``; ``lakewarden.table.clean``)
errors                                   NotATableError, TableAlreadyExistsError, ... (below)

``Table``, ``read``, the connection factory and ``CleanResult`` are defined a layer above this
package (``lakewarden.api``: they drive the table services, the error table and publishing,
which build on this package) and are named here for users only; no module of the library
below ``lakewarden.api`` imports them (``tests/unit/test_import_graph.py``).
"""

# The names are imported on first use (PEP 562), not here: a Spark task worker imports
# ``lakewarden.table.config`` and a few siblings, and paid for the whole table layer (the
# cleaner, the reader with pyarrow.dataset and pandas, the pydantic plan models) on every
# fresh worker if this package imported them eagerly.

from __future__ import annotations

from typing import TYPE_CHECKING

from lakewarden._lazy import lazy_exports

if TYPE_CHECKING:
    from lakewarden.api.clean import CleanResult
    from lakewarden.api.connection import (
        Connection,
        close_shared_connections,
        connect,
        load_coordinator,
        require_kafka,
        shared_connection,
    )
    from lakewarden.api.table import (
        Table,
        read,
    )
    from lakewarden.table.clean import (
        CleaningPolicy,
        CleanPolicy,
        InstantCleanedError,
        InvalidCleanPolicyError,
        MissingDataFileError,
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
    from lakewarden.table.coordinator import (
        Coordinator,
        EmbeddedCoordinator,
        ExecutorLiveness,
        Heartbeating,
        Lease,
        LeaseLostError,
        Liveness,
        LockReentryError,
        LockTimeoutError,
        TableLock,
        TimelineAudit,
    )
    from lakewarden.table.instant import (
        Action,
        Instant,
        Transition,
    )
    from lakewarden.table.reader import (
        ColumnNotFoundError,
        UnsupportedSliceError,
    )
    from lakewarden.table.snapshot import (
        InstantNotCompletedError,
        Snapshot,
    )
    from lakewarden.table.stats import (
        CommitStats,
        FileGroupId,
        WorkloadProfile,
        WriteStat,
    )
    from lakewarden.table.timeline import (
        ConcurrentAppendError,
        IllegalTransitionError,
        Timeline,
        TimelineCorruptError,
        TimelineGapError,
    )
    from lakewarden.table.timeline_state import (
        InstantState,
        TimelineState,
    )
    from lakewarden.table.writer import (
        CommitResult,
        InvalidRecordError,
        Operation,
        SchemaMismatchError,
    )

_EXPORTS: dict[str, str] = {
    "CleaningPolicy": "lakewarden.table.clean",
    "CleanPolicy": "lakewarden.table.clean",
    "CleanResult": "lakewarden.api.clean",
    "InstantCleanedError": "lakewarden.table.clean",
    "InvalidCleanPolicyError": "lakewarden.table.clean",
    "MissingDataFileError": "lakewarden.table.clean",
    "InvalidTableConfigError": "lakewarden.table.config",
    "NotATableError": "lakewarden.table.config",
    "TableAlreadyExistsError": "lakewarden.table.config",
    "TableConfig": "lakewarden.table.config",
    "UnsupportedFormatVersionError": "lakewarden.table.config",
    "OverlappingCommitConflict": "lakewarden.table.conflicts",
    "PendingPlanConflict": "lakewarden.table.conflicts",
    "WriteConflictError": "lakewarden.table.conflicts",
    "Connection": "lakewarden.api.connection",
    "close_shared_connections": "lakewarden.api.connection",
    "connect": "lakewarden.api.connection",
    "load_coordinator": "lakewarden.api.connection",
    "require_kafka": "lakewarden.api.connection",
    "shared_connection": "lakewarden.api.connection",
    "Coordinator": "lakewarden.table.coordinator",
    "EmbeddedCoordinator": "lakewarden.table.coordinator",
    "ExecutorLiveness": "lakewarden.table.coordinator",
    "Heartbeating": "lakewarden.table.coordinator",
    "TableLock": "lakewarden.table.coordinator",
    "TimelineAudit": "lakewarden.table.coordinator",
    "Lease": "lakewarden.table.coordinator",
    "LeaseLostError": "lakewarden.table.coordinator",
    "Liveness": "lakewarden.table.coordinator",
    "LockReentryError": "lakewarden.table.coordinator",
    "LockTimeoutError": "lakewarden.table.coordinator",
    "Action": "lakewarden.table.instant",
    "Instant": "lakewarden.table.instant",
    "Transition": "lakewarden.table.instant",
    "ColumnNotFoundError": "lakewarden.table.reader",
    "UnsupportedSliceError": "lakewarden.table.reader",
    "InstantNotCompletedError": "lakewarden.table.snapshot",
    "Snapshot": "lakewarden.table.snapshot",
    "CommitStats": "lakewarden.table.stats",
    "FileGroupId": "lakewarden.table.stats",
    "WorkloadProfile": "lakewarden.table.stats",
    "WriteStat": "lakewarden.table.stats",
    "Table": "lakewarden.api.table",
    "read": "lakewarden.api.table",
    "ConcurrentAppendError": "lakewarden.table.timeline",
    "IllegalTransitionError": "lakewarden.table.timeline",
    "Timeline": "lakewarden.table.timeline",
    "TimelineCorruptError": "lakewarden.table.timeline",
    "TimelineGapError": "lakewarden.table.timeline",
    "InstantState": "lakewarden.table.timeline_state",
    "TimelineState": "lakewarden.table.timeline_state",
    "CommitResult": "lakewarden.table.writer",
    "InvalidRecordError": "lakewarden.table.writer",
    "Operation": "lakewarden.table.writer",
    "SchemaMismatchError": "lakewarden.table.writer",
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


__all__ = [
    "Action",
    "CleanPolicy",
    "CleanResult",
    "CleaningPolicy",
    "InstantCleanedError",
    "InvalidCleanPolicyError",
    "MissingDataFileError",
    "ColumnNotFoundError",
    "CommitResult",
    "CommitStats",
    "ConcurrentAppendError",
    "Connection",
    "Coordinator",
    "EmbeddedCoordinator",
    "ExecutorLiveness",
    "Heartbeating",
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
    "TableLock",
    "Timeline",
    "TimelineAudit",
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
    "read",
    "require_kafka",
    "shared_connection",
]
