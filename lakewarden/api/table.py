"""``Table``: create or open a table, write to it, read it, travel in time, read changes.

    table = Table.create("/data/orders", name="orders", record_key="id", schema=schema,
                         partition_by=["region"], ordering_field="ts", buckets=4)
    result = table.write(batch, operation="upsert")        # CommitResult(instant, stats)
    table.read(filter=pc.field("region") == "eu")          # the latest snapshot
    table.read(as_of=result.instant)                       # time travel
    table.changes(since_instant=result.instant)            # incremental
    table.clean(dry_run=True)                              # what a clean would delete
    table.to_arrow_dataset()                               # for DuckDB, Polars, pandas

A table receives its coordinator (the table lock and heartbeats). ``Table.create`` and
``Table.open`` given none ask ``lakewarden.api.connection.shared_connection(settings)``, the
one factory: timeline-lock and heartbeat-monitor when the settings name a Kafka broker, else an
in-process ``EmbeddedCoordinator`` shared by the tables of this process (so two ``Table``
objects on one table take turns on one lock). Safety never depends on it: concurrent processes
are kept apart by the timeline's put-if-absent appends and the conflict rules the state
machine replays.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from lakewarden.api.clean import CleanRequest, CleanResult, clean_table
from lakewarden.api.connection import shared_connection
from lakewarden.commit import CommitterOptions
from lakewarden.errortable.divert import error_rows, settle, spool
from lakewarden.handle import TableHandle
from lakewarden.publish import DeltaPublisher, schema_string
from lakewarden.settings import Settings
from lakewarden.storage import Storage, open_storage
from lakewarden.table.clean import (
    CleanPolicy,
    RollbackContext,
    check_not_cleaned,
    read_past_cleans,
)
from lakewarden.table.config import (
    FORMAT_VERSION,
    ErrorTableChoice,
    TableConfig,
    load_config,
    save_new_config,
)
from lakewarden.table.coordinator import Coordinator
from lakewarden.table.log_cache import LogCache
from lakewarden.table.reader import (
    UnsupportedSliceError,
    files_dataset,
    read_changes,
    read_snapshot,
)
from lakewarden.table.snapshot import Changes, Snapshot, build_snapshot, changes_since
from lakewarden.table.timeline import InstantState, TimelineState
from lakewarden.table.write_input import BadRecords
from lakewarden.table.writer import CommitResult, Divert, Operation, WriteContext, write

if TYPE_CHECKING:  # the table services are imported in the methods that run them
    from lakewarden.table.cancel import CancelRequestOutcome
    from lakewarden.table.instant import Instant
    from lakewarden.table.plans import CancellationPolicy
    from lakewarden.tableservice import ExecuteCancelOutcome, ServiceContext, ServiceRun


BadRecordsChoice = Literal["fail", "skip", "error-table"]
BAD_RECORDS: tuple[BadRecordsChoice, ...] = ("fail", "skip", "error-table")


class Table(TableHandle):
    """A lakewarden table; make one with ``Table.create`` or ``Table.open``, or from a storage,
    its config and a coordinator (opened as ``lakewarden.handle.TableHandle`` opens one)."""

    def __init__(
        self,
        storage: Storage,
        config: TableConfig,
        *,
        coordinator: Coordinator,
        actor: str | None = None,
        settings: Settings | None = None,
    ) -> None:
        super().__init__(storage, config, coordinator=coordinator, actor=actor, settings=settings)
        # Merge-on-read: log files this table's reads scanned, reused by later reads.
        self.log_cache = LogCache()

    @classmethod
    def create(
        cls,
        uri: str,
        *,
        name: str,
        record_key: str,
        schema: pa.Schema,
        partition_by: Sequence[str] = (),
        ordering_field: str | None = None,
        table_type: Literal["cow", "mor", "copy_on_write", "merge_on_read"] = "cow",
        buckets: int = 1,
        clean_policy: CleanPolicy | None = None,
        publish_delta: bool = False,
        coordinator: Coordinator | None = None,
        settings: Settings | None = None,
        error_table: ErrorTableChoice | Literal["local", "global"] | None = None,
        format_version: int = FORMAT_VERSION,
    ) -> Table:
        """Create a table at ``uri`` (a path, ``file://`` or ``s3://bucket/prefix``). Without a
        ``coordinator``, the shared one ``settings`` call for (see the module docstring).
        ``publish_delta``: publish every completed instant as a Delta Lake version
        (``lakewarden.publish``); version 0, the empty table, is written here.
        ``error_table``: where its failed records go, recorded in its config (``"local"``,
        ``"global"``, or an ``ErrorTableChoice`` naming the suffix, or the global name and
        base path); None leaves it to the settings of each writer and of the error-sink.
        ``format_version``: 1 makes base files store every meta column, as lakewarden did
        before version 2 (for readers that predate it).

        Raises: InvalidTableConfigError, TableAlreadyExistsError, ConfigurationError,
        UnpublishableSchemaError."""
        config = TableConfig.new(
            name=name,
            record_key=record_key,
            schema=schema,
            partition_by=partition_by,
            ordering_field=ordering_field,
            table_type=table_type,
            buckets=buckets,
            clean_policy=clean_policy,
            publish_delta=publish_delta,
            error_table=ErrorTableChoice(kind=error_table)
            if isinstance(error_table, str)
            else error_table,
            format_version=format_version,
        )
        if publish_delta:
            schema_string(config.pa_schema)  # a schema Delta cannot express: refused up front
        storage = open_storage(uri, settings)
        save_new_config(storage, config)
        table = cls(
            storage,
            config,
            coordinator=coordinator or _coordinator_for(settings),
            settings=settings,
        )
        if publish_delta:
            DeltaPublisher(storage, config, table.timeline_log).sync()
        return table

    @classmethod
    def open(
        cls, uri: str, *, coordinator: Coordinator | None = None, settings: Settings | None = None
    ) -> Table:
        """Open the table at ``uri``. Without a ``coordinator``, the shared one ``settings``
        call for: timeline-lock's when they name a Kafka broker (see the module docstring).

        Raises: NotATableError, UnsupportedFormatVersionError, InvalidTableConfigError,
        ConfigurationError."""
        # Read from the environment once, not by each of storage, coordinator and table (a
        # third of a small read's time).
        settings = settings if settings is not None else Settings()
        storage = open_storage(uri, settings)
        config = load_config(storage)
        return cls(
            storage,
            config,
            coordinator=coordinator or _coordinator_for(settings),
            settings=settings,
        )

    def __repr__(self) -> str:
        return f"Table({self.uri!r}, name={self.name!r}, id={self.table_id})"

    # -- timeline -----------------------------------------------------------------------------

    def timeline(self) -> list[InstantState]:
        """Every instant with its current state, in requested order."""
        return sorted(self.state().instants.values(), key=lambda s: s.requested_seq)

    def snapshot(self, as_of: str | None = None) -> Snapshot:
        """The files of the table as of a completed instant (default: the latest).

        Raises: InstantNotCompletedError."""
        return self._snapshot(self.state(), as_of)

    def _snapshot(self, state: TimelineState, as_of: str | None) -> Snapshot:
        """The snapshot of ``state`` as of ``as_of``; the latest from the table's cache
        (``TableHandle.snapshots``: only what completed since the last one is applied)."""
        completed = state.completed()
        if as_of is None:
            return self.snapshots.latest(completed)
        return build_snapshot(completed, as_of)

    # -- write and read -----------------------------------------------------------------------

    def write(
        self,
        data: pa.Table | pa.RecordBatch,
        operation: Operation = "upsert",
        *,
        bad_records: BadRecordsChoice = "fail",
    ) -> CommitResult:
        """Write ``data`` as one commit (``insert``, ``upsert`` or ``delete``); see
        ``lakewarden.table.writer`` for the protocol and the merge rules.

        ``bad_records`` (records with a null record key or a null in a required field), as
        Spark writes and ``lakewarden ingest`` take it: ``fail`` (the default: the write
        fails naming the first, nothing committed), ``skip`` (left out, counted in the
        statistics' ``failed_records``), ``error-table`` (left out, counted, and committed
        into the table's error table exactly once with this instant:
        ``lakewarden.errortable.divert``).

        Raises: SchemaMismatchError, InvalidRecordError (nothing committed),
        OverlappingCommitConflict / PendingPlanConflict (rolled back), LockTimeoutError,
        CommitStateUnknownError, ValueError (an unknown ``bad_records``); with
        ``error-table``, what committing the errors raises (the spool stays: the next write
        or ``settle_errors`` commits it)."""
        if bad_records not in BAD_RECORDS:
            raise ValueError(f"bad_records must be one of {', '.join(BAD_RECORDS)}")
        if isinstance(data, pa.RecordBatch):
            data = pa.Table.from_batches([data])
        if bad_records == "error-table":
            self.settle_errors()  # spools a crashed write left (steps 2-3 of divert)
        ctx = WriteContext(
            self.storage,
            self.config,
            self.timeline_log,
            self.coordinator,
            self.actor,
            committer=CommitterOptions.from_settings(self.settings.committer),
        )
        if bad_records == "fail":
            return write(ctx, data, operation)
        result = write(ctx, data, operation, divert=self._divert(operation, bad_records))
        if bad_records == "error-table" and result.stats.failed_records:
            self.settle_errors()
        return result

    def settle_errors(self) -> list[str]:
        """Commit into the error table the bad records that ``write(...,
        bad_records="error-table")`` spooled for instants that completed; drop those of
        instants rolled back. Returns the instants whose records were committed.

        Raises: LockTimeoutError, CommitStateUnknownError, StorageError."""
        return settle(self).committed

    def _divert(self, operation: str, choice: BadRecordsChoice) -> Divert:
        def divert(instant: str, job_id: str, attempt: str, bad: BadRecords) -> None:
            if choice == "skip":
                return
            spool(self, instant, error_rows(self, instant, job_id, attempt, operation, bad))

        return divert

    def read(
        self,
        *,
        as_of: str | None = None,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
        with_meta: bool = False,
    ) -> pa.Table:
        """The records as of ``as_of`` (default: the latest completed instant).

        A read of the latest snapshot that a write and a clean overtake before it opened
        its files (possible only when the clean's retention window is shorter than the read)
        reloads the timeline and reads the new latest snapshot, once.

        Raises: InstantNotCompletedError, InstantCleanedError (a clean deleted files of that
        snapshot: outside the table's retention), MissingDataFileError (a file is gone that
        no clean deleted), ColumnNotFoundError."""

        def pick(state: TimelineState) -> Snapshot:
            snapshot = self._snapshot(state, as_of)
            if as_of is not None:
                check_not_cleaned(state, snapshot, table=self.name)
            return snapshot

        def scan(snapshot: Snapshot) -> pa.Table:
            return read_snapshot(
                self.storage,
                self.config,
                snapshot,
                columns=columns,
                filter=filter,
                with_meta=with_meta,
                log_cache=self.log_cache,
            )

        return read_past_cleans(
            self.state,
            pick,
            scan,
            lambda snapshot: snapshot.slices.values(),
            as_of=lambda snapshot: snapshot.as_of,
            table=self.name,
        )

    def to_arrow_dataset(self, as_of: str | None = None) -> ds.Dataset:
        """A ``pyarrow.dataset`` over exactly the files of the snapshot as of ``as_of``
        (default: the latest), with the table's columns: what DuckDB, Polars and pandas read
        without Spark. The file list is fixed when it is made (a later commit does not change
        it); filters on partition columns skip whole files. Read it within the table's
        retention window (``CleanPolicy.retention_window_s``): a clean may delete its files
        once they have been superseded for that long.

        Raises: InstantNotCompletedError, InstantCleanedError (a clean deleted files of that
        snapshot), UnsupportedSliceError (a merge-on-read table: its records are base files
        merged with log files, which a plain Parquet dataset cannot express)."""
        if self.config.table_type == "mor":
            raise UnsupportedSliceError(
                f"table {self.name!r} is merge-on-read: its snapshot is base files merged with "
                "log files, which a pyarrow dataset cannot express. Help: read it with "
                "Table.read(as_of=...) (a pyarrow.Table) or Spark's format('lakewarden').",
                table=self.name,
            )
        state = self.state()
        snapshot = self._snapshot(state, as_of)
        if as_of is not None:
            check_not_cleaned(state, snapshot, table=self.name)
        return files_dataset(
            self.storage, self.config, snapshot.base_files(), self.config.pa_schema
        )

    def changes(
        self,
        since_instant: str | None,
        *,
        until: str | None = None,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
        with_meta: bool = False,
    ) -> pa.Table:
        """Records written by the instants completed after ``since_instant`` (a completed
        instant; None: from the start) up to ``until``, each in its latest version. Overtaken
        by a clean, it retries once as ``read`` does.

        Raises: InstantNotCompletedError, InstantCleanedError (a clean deleted files the
        changes up to ``until`` are in), MissingDataFileError, ColumnNotFoundError."""

        def pick(state: TimelineState) -> Changes:
            changes = changes_since(state.completed(), since_instant, until)
            check_not_cleaned(state, changes.snapshot, table=self.name, slices=changes.slices())
            return changes

        def scan(changes: Changes) -> pa.Table:
            return read_changes(
                self.storage,
                self.config,
                changes,
                columns=columns,
                filter=filter,
                with_meta=with_meta,
                log_cache=self.log_cache,
            )

        return read_past_cleans(
            self.state,
            pick,
            scan,
            lambda changes: changes.slices(),
            as_of=lambda changes: changes.snapshot.as_of,
            table=self.name,
        )

    # -- cleaning -----------------------------------------------------------------------------

    def clean(
        self,
        policy: CleanPolicy | str | None = None,
        dry_run: bool = False,
        *,
        delete_orphans: bool = False,
        dead: Collection[str] = (),
        wall_clock: Callable[[], float] = time.time,
    ) -> CleanResult:
        """Clean the table as a ``clean`` instant (``lakewarden.api.clean``): roll back
        writes whose executor is dead, cancel the cancellable plans past their cancellation
        policy with no live executor (RFC-79: request_cancel, execute_cancel), then plan the
        files to delete (old versions by ``policy``, default the table's ``clean_policy``;
        files of rolled-back instants;
        leftovers of finished jobs; orphans only with ``delete_orphans``), delete them and
        append ``completed``. A pending clean of an interrupted run is finished first, as it
        was planned. ``dry_run`` changes nothing and reports what would happen. ``dead``:
        instants known dead (``HeartbeatExpired``); ``wall_clock``: epoch seconds (tests).

        Raises: InvalidCleanPolicyError, LockTimeoutError, ConcurrentAppendError,
        CommitStateUnknownError, StorageError (a rerun resumes)."""
        if isinstance(policy, str):
            policy = CleanPolicy.parse(policy, base=self.config.clean_policy)
        ctx = RollbackContext(
            self.storage,
            self.timeline_log,
            self.coordinator,
            self.table_id,
            self.actor,
            config=self.config,
        )
        request = CleanRequest(
            policy=policy or self.config.clean_policy,
            dry_run=dry_run,
            delete_orphans=delete_orphans,
            dead=dead,
            wall_clock=wall_clock,
        )
        return clean_table(ctx, request)

    # -- table services (RFC-79; lakewarden.tableservice) ---------------------------------------
    # Imported in the methods: a table that only writes and reads does not load them.

    def service_context(self) -> ServiceContext:
        """What the table services need of this table."""
        from lakewarden.tableservice import ServiceContext

        return ServiceContext(
            self.storage, self.config, self.timeline_log, self.coordinator, self.actor
        )

    def schedule_clustering(
        self,
        partitions: Sequence[str] | None = None,
        max_file_groups: int | None = None,
        sort_by: Sequence[str] | None = None,
        cancellable: bool = False,
        cancellation_policy: CancellationPolicy | Mapping[str, float] | None = None,
    ) -> Instant | None:
        """Append a ``clustering`` plan for the buckets worth rewriting (more than one slice;
        any, with ``sort_by``), or return None when there is nothing to do. The plan names its
        input slices, ``cancellable`` and the ``cancellation_policy`` (``{"max_age_s": ...}``
        or ``{"max_completed_instants": ...}``), honoured by the cleaner.

        Raises: InvalidPlanOptionsError, pydantic ValidationError (a malformed policy),
        LockTimeoutError, ConcurrentAppendError, CommitStateUnknownError."""
        from lakewarden.table.plans import CancellationPolicy
        from lakewarden.tableservice import ClusteringStrategy, schedule

        policy = (
            CancellationPolicy.model_validate(cancellation_policy)
            if cancellation_policy is not None
            else None
        )
        strategy = ClusteringStrategy(
            partitions=partitions, max_file_groups=max_file_groups, sort_by=sort_by or ()
        )
        return schedule(
            self.service_context(),
            strategy,
            cancellable=cancellable,
            cancellation_policy=policy,
        )

    def schedule_compaction(
        self,
        partitions: Sequence[str] | None = None,
        max_file_groups: int | None = None,
        min_log_files: int = 1,
        cancellable: bool = False,
        cancellation_policy: CancellationPolicy | Mapping[str, float] | None = None,
        bad_records: Literal["fail", "error-table"] = "fail",
    ) -> Instant | None:
        """Append a ``compaction`` plan for the merge-on-read slices with at least
        ``min_log_files`` log files (``lakewarden.tableservice.compaction``), or return None
        when there is nothing to compact. Non-cancellable by default, as in Hudi: ingestion into
        its file groups waits for it; ``cancellable=True`` lets ingestion take precedence.
        ``bad_records``: a merged record the table's schema cannot hold fails the plan
        (``fail``, the default) or goes to the table's error table with the compaction
        instant (``error-table``; ``lakewarden.tableservice.unfit``). Execute it with
        ``run_table_service``.

        Raises: InvalidPlanOptionsError, pydantic ValidationError (a malformed policy),
        LockTimeoutError, ConcurrentAppendError, CommitStateUnknownError."""
        from lakewarden.table.plans import CancellationPolicy
        from lakewarden.tableservice import CompactionStrategy, schedule

        policy = (
            CancellationPolicy.model_validate(cancellation_policy)
            if cancellation_policy is not None
            else None
        )
        strategy = CompactionStrategy(
            partitions=partitions,
            max_file_groups=max_file_groups,
            min_log_files=min_log_files,
            bad_records=bad_records,
        )
        return schedule(
            self.service_context(), strategy, cancellable=cancellable, cancellation_policy=policy
        )

    def run_table_service(self, instant: str | Instant) -> ServiceRun:
        """Execute the plan ``instant`` in this process (``lakewarden.tableservice.executor``):
        claim, heartbeat, roll back earlier attempts, rewrite, then ``completed``, or cleanup
        and ``aborted`` when its cancellation was requested or an ingestion took precedence.
        Records a compaction set aside (``bad_records="error-table"``) are committed into
        the error table once it completed, with its instant (``settle_errors``, also run
        first for what a crashed run left).

        Raises: PlanAlreadyExecutingError (naming the owner), InstantAlreadyCompletedError,
        UnknownPlanError, NotATableServicePlanError, WriteConflictError subclasses,
        ExecutorOutputLostError, UnwritableRecordsError, UndivertibleRecordsError,
        LockTimeoutError, CommitStateUnknownError; after a completion that set records
        aside, what committing them raises (the spool stays: ``settle_errors`` commits it)."""
        from lakewarden.tableservice import run_table_service

        self.settle_errors()
        run = run_table_service(self.service_context(), str(instant))
        if run.stats is not None and run.stats.failed_records:
            self.settle_errors()
        return run

    def request_cancel(
        self, instant: str | Instant, *, requested_by: str | None = None, reason: str
    ) -> CancelRequestOutcome:
        """Request the cancellation of the cancellable plan ``instant`` (RFC-79; irrevocable:
        the plan can then only end aborted).

        Raises: InstantAlreadyCompletedError, PlanNotCancellableError, UnknownPlanError,
        LockTimeoutError."""
        from lakewarden.table.cancel import request_cancel

        return request_cancel(
            self.timeline_log,
            self.coordinator,
            self.table_id,
            str(instant),
            requested_by=requested_by or self.actor,
            reason=reason,
            actor=self.actor,
        )

    def execute_cancel(
        self, instant: str | Instant, *, expired: bool = False
    ) -> ExecuteCancelOutcome:
        """Delete the files of the cancel-requested plan ``instant`` and append ``aborted``
        (RFC-79); idempotent, and finishes after a crash at any step. Only positive knowledge
        of the executor's death goes on (``lakewarden.table.death``); ``expired``: the caller
        holds heartbeat-monitor's ``HeartbeatExpired`` for the plan.

        Raises: PlanStillExecutingError (naming the owner), LivenessUnknownError (nothing says
        the executor is dead: heartbeat-monitor down or behind), CancelNotRequestedError,
        InstantAlreadyCompletedError, PlanNotCancellableError, UnknownPlanError,
        LockTimeoutError."""
        from lakewarden.tableservice import execute_cancel

        return execute_cancel(self.service_context(), str(instant), expired=expired)


def _coordinator_for(settings: Settings | None) -> Coordinator:
    # The edge convenience: the one factory, explicitly (library code is handed one).
    return shared_connection(settings).coordinator


def read(
    uri: str,
    as_of: str | None = None,
    columns: Sequence[str] | None = None,
    filter: pc.Expression | None = None,
    *,
    settings: Settings | None = None,
) -> pa.Table:
    """Read the table at ``uri`` as of ``as_of`` (default: latest) into a ``pyarrow.Table``.

    Raises: NotATableError, UnsupportedFormatVersionError, InstantNotCompletedError,
    ColumnNotFoundError."""
    return Table.open(uri, settings=settings).read(as_of=as_of, columns=columns, filter=filter)
