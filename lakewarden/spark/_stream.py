"""``df.writeStream.format("lakewarden")``: every micro-batch is one instant, committed once.

PySpark 4.0 gives a streaming writer no hook on the driver that knows the batch id before the
tasks run (``streamWriter()`` is called per batch, but without it), so the *tasks* open the
batch's instant: the first task attempt of a batch with rows appends ``requested`` naming the
(query id, run id, batch id) under the table lock (``SparkTransaction.begin_batch``); the
others find it, without the lock when the timeline shows it already, else under the lock. A
task that finds the batch completed by an earlier run of the query writes nothing. ``commit``
completes the instant with the batch recorded in ``CommitStats.batch``, refusing if the batch
completed already; see ``lakewarden.spark._transaction``.

The writer also subclasses ``DataSourceArrowWriter``: PySpark's write worker checks for it and
then hands ``write`` Arrow batches instead of rows, for streams as for batch writes.
Micro-batches are appends (``insert``); a stream of upserts goes through ``foreachBatch`` and
``lakewarden.spark.write``.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

import lakewarden.faults as faults
from lakewarden.api.connection import shared_connection
from lakewarden.settings import CommitterSettings
from lakewarden.spark import _job
from lakewarden.spark._announce import connect_announcer
from lakewarden.spark._arrow import check_write_schema
from lakewarden.spark._bad_rows import INGEST_COLUMNS
from lakewarden.spark._create import prepare_table
from lakewarden.spark._keeper import keep_alive
from lakewarden.spark._messages import EmptyTaskMessage, SkippedBatchMessage, TaskCommitMessage
from lakewarden.spark._options import InvalidOptionError, WriteSpec, load_settings
from lakewarden.spark._stream_session import stream_session
from lakewarden.spark._task import current_task, write_task
from lakewarden.spark._transaction import (
    BatchAlreadyCommittedError,
    BatchKey,
    completed_batch,
    pending_batch,
    pending_of_checkpoint,
)
from lakewarden.table.config import ErrorTableChoice

log = logging.getLogger("lakewarden.spark")

OPERATION = "insert"


def batch_key(checkpoint: str) -> BatchKey:
    """The running task's micro-batch. Raises: InvalidOptionError outside a streaming query."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    query = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None
    batch = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
    if ctx is None or query is None or batch is None:
        raise InvalidOptionError("the lakewarden stream writer runs inside a streaming query only")
    # Structured Streaming runs every job of a run in the job group named by its run id.
    run = ctx.getLocalProperty("spark.jobGroup.id") or "unknown-run"
    return BatchKey(query_id=query, run_id=run, batch_id=int(batch), checkpoint=checkpoint)


def warm_clients(settings_json: str | None, *, announces_manifests: bool) -> None:
    """Start this process's Kafka clients now, rather than at their first use in a batch
    with rows: the shared coordinator's (lock, timeline announcer, heartbeats, cleaner
    registration) and, in a write task, the task-manifest announcer. Never raises: what did
    not connect connects at first use, and raises there."""
    try:
        settings = load_settings(settings_json)
        shared_connection(settings).coordinator.connect()
        if announces_manifests:
            connect_announcer(settings)
    except Exception as err:  # noqa: BLE001 - a warm-up: the batch with rows reports it
        log.warning("stream clients not started ahead: %s", err)


def register_table_ahead(uri: str, settings_json: str | None, query_id: str) -> None:
    """Open the query's session and register its table with the cleaner now, as the first
    ``requested`` entry of this process would (``Coordinator.before_requested``, once per
    process and table): the registration's first delivery is otherwise paid inside the
    first batch with rows of a task process that joins a running query, on its way to the
    table lock. Never raises: the batch with rows opens and registers the table itself, and
    reports what failed."""
    try:
        with stream_session(uri, settings_json, query_id) as session:
            table = session.table
            table.coordinator.before_requested(table.config.table_id, _job.actor())
    except Exception as err:  # noqa: BLE001 - a warm-up: the batch with rows reports it
        log.warning("table not registered ahead: %s", err)


_warmed: set[tuple[object, ...]] = set()  # the warm-ups this process started
_warmed_guard = threading.Lock()


def _first_time(warm_up: tuple[object, ...]) -> bool:
    """Whether this process starts ``warm_up`` now (never before); it is started from now on."""
    with _warmed_guard:
        new = warm_up not in _warmed
        _warmed.add(warm_up)
        return new


def warm_ahead(
    settings_json: str | None,
    *,
    announces_manifests: bool,
    query_table: tuple[str, str] | None = None,
) -> None:
    """On a daemon thread, ``warm_clients`` once per process, settings and role, then, for
    a write task (which names its ``query_table``: the table URI and the streaming query
    id), ``register_table_ahead`` once per process, table and query.

    Spark runs a stream's tasks and its commits in Python processes of their own; in each,
    the first lock, announcement, heartbeat and registration would otherwise start their
    clients inside a batch with rows (a task that opens the batch's instant or announces its
    manifest, the planner's ``inflight``), which is the end-to-end latency of that batch's
    records. A task starts the warm-up before it waits for its first rows (Spark's read of
    the batch runs meanwhile); a commit without rows (a query's first trigger) starts it for
    the planner's batches after."""
    clients = _first_time(("clients", settings_json, announces_manifests))
    table = query_table
    if table is not None and not _first_time(("table", settings_json, *table)):
        table = None
    if not clients and table is None:
        return

    def warm() -> None:
        if clients:
            warm_clients(settings_json, announces_manifests=announces_manifests)
        if table is not None:
            register_table_ahead(table[0], settings_json, table[1])

    threading.Thread(target=warm, name="lw-warm-clients", daemon=True).start()


class LakewardenStreamWriter(DataSourceStreamWriter, DataSourceArrowWriter):
    """Holds strings only (pickled to the tasks, rebuilt for every commit)."""

    def __init__(
        self,
        uri: str,
        settings_json: str | None,
        checkpoint: str = "",
        ingest_errors: bool = False,
        committer: CommitterSettings | None = None,
        error_table: ErrorTableChoice | None = None,
    ) -> None:
        self.uri = uri
        self.settings_json = settings_json
        self.checkpoint = checkpoint
        self.ingest_errors = ingest_errors
        self.committer = committer
        self.error_table = error_table

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """One task attempt of one micro-batch (on an executor)."""
        identity, key = current_task(), batch_key(self.checkpoint)
        warm_ahead(
            self.settings_json, announces_manifests=True, query_table=(self.uri, key.query_id)
        )
        first = next(iterator, None)
        if first is None:
            return EmptyTaskMessage(batch=key)
        spec = self._open_batch(key)
        if isinstance(spec, SkippedBatchMessage):
            return spec
        message = write_task(spec, identity, itertools.chain([first], iterator))
        return dataclasses.replace(message, batch=key)

    def _open_batch(self, key: BatchKey) -> WriteSpec | SkippedBatchMessage:
        with stream_session(self.uri, self.settings_json, key.query_id) as session:
            return self._open_batch_of(session.table, key)

    def _open_batch_of(
        self, table: _job.TableHandle, key: BatchKey
    ) -> WriteSpec | SkippedBatchMessage:
        state = table.timeline.load()
        done = completed_batch(state, key)
        if done is not None:
            return SkippedBatchMessage(done.instant, key.query_id, key.batch_id)
        found = pending_batch(state, key)
        if found is not None:
            # Another task of the batch opened its instant already: joining it takes no
            # lease (the locked path would find the same instant and append nothing), and
            # no staging set up only to be aborted.
            return self._write_spec(*found)
        try:
            batch = _job.open_batch(table, key, OPERATION)
        except BatchAlreadyCommittedError as err:
            return SkippedBatchMessage(err.committed_by, key.query_id, key.batch_id)
        if batch.opened:
            # The task that opened the instant beats for it until it is terminal: the driver
            # only learns of the instant at commit, and an ingest killed before that must still
            # leave an instant heartbeat-monitor declares dead (so the cleaner rolls it back).
            keep_alive(
                table.timeline,
                table.coordinator,
                table.config.table_id,
                batch.instant,
                _job.actor(),
            )
        return self._write_spec(batch.instant, batch.job_id)

    def _write_spec(self, instant: str, job_id: str) -> WriteSpec:
        """What a task writes the batch's rows under: its instant and job."""
        return WriteSpec(
            self.uri,
            instant,
            job_id,
            OPERATION,
            self.settings_json,
            ingest_errors=self.ingest_errors,
            committer=self.committer,
            error_table=self.error_table,
        )

    def commit(  # type: ignore[override]  # streaming signature (DataSourceStreamWriter)
        self,
        messages: Sequence[WriterCommitMessage | None],
        batchId: int,  # noqa: N803
    ) -> None:
        """Commit the micro-batch's instant once (driver)."""
        spec, key = self._spec(messages)
        if spec is None or key is None:
            self._warm_planner(messages)
            return  # no rows, or committed by an earlier run
        try:
            # The table and the commit client stay open for the query's next batch.
            with stream_session(self.uri, self.settings_json, key.query_id) as session:
                table, client = session.table, session.commit_client()
                _job.commit_write(spec, messages, batch=key, table=table, client=client)
        except BatchAlreadyCommittedError:
            return  # our instant was rolled back; the batch is in the table exactly once
        faults.point("spark.stream.after_batch_commit", batch=batchId)

    def _warm_planner(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """A commit without rows starts the planner process's clients and its session of the
        query (the table, the job-committer client) for the first commit with rows. Never
        raises: that commit opens what could not be opened here, and reports it."""
        warm_ahead(self.settings_json, announces_manifests=False)
        key = next((m.batch for m in messages if isinstance(m, EmptyTaskMessage)), None)
        if key is None:
            return
        try:
            with stream_session(self.uri, self.settings_json, key.query_id) as session:
                session.connect_ahead()
        except Exception as err:  # noqa: BLE001 - a warm-up: the batch with rows reports it
            log.warning("stream session not opened ahead: %s", err)

    def abort(  # type: ignore[override]  # streaming signature (DataSourceStreamWriter)
        self,
        messages: Sequence[WriterCommitMessage | None],
        batchId: int,  # noqa: N803
    ) -> None:
        """``rolled_back`` and job abort for the batch's instant, if it opened one (driver).
        When every task failed there is no message to name the instant: it is found by the
        checkpoint location and batch id recorded in its ``requested`` plan."""
        reason = f"Spark aborted micro-batch {batchId}"
        spec, _ = self._spec(messages)
        if spec is not None:
            _job.abort_write(spec, reason)
            return
        if not self.checkpoint:
            return  # the cleaner rolls the instant back once its heartbeat expired
        table = _job.TableHandle.open(self.uri, self.settings_json)
        for instant, job_id in pending_of_checkpoint(
            table.timeline.load(), self.checkpoint, batchId
        ):
            _job.abort_write(
                WriteSpec(self.uri, instant, job_id, OPERATION, self.settings_json), reason
            )

    def _spec(
        self, messages: Sequence[WriterCommitMessage | None]
    ) -> tuple[WriteSpec | None, BatchKey | None]:
        written = [m for m in messages if isinstance(m, TaskCommitMessage)]
        if not written:
            return None, None
        first = written[0]
        spec = WriteSpec(
            self.uri,
            first.instant,
            first.job_id,
            OPERATION,
            self.settings_json,
            committer=self.committer,
            error_table=self.error_table,
        )
        return spec, first.batch


def check_stream_target(
    uri: str,
    settings_json: str | None,
    schema: StructType,
    overwrite: bool,
    options: Mapping[str, str] | None = None,
    *,
    ingest_errors: bool = False,
) -> None:
    """Create the table if absent (the table options of ``_create``), check the stream's
    schema against it.

    Raises: InvalidOptionError (complete output mode), NotATableError,
    TableOptionsMismatchError, SchemaMismatchError."""
    if overwrite:
        raise InvalidOptionError(
            "the lakewarden stream writer appends: use outputMode('append') (or 'update')."
        )
    ignore = INGEST_COLUMNS if ingest_errors else ()
    table_columns = StructType([f for f in schema.fields if f.name not in ignore])
    config = prepare_table(uri, settings_json, options or {}, table_columns)
    check_write_schema(schema, config, OPERATION, ignore=ignore)
