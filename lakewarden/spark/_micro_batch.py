"""Micro-batches committed from the driver: the ``foreachBatch`` function of a streaming query.

``writeStream.format("lakewarden")`` cannot open a micro-batch's instant before its tasks run
(PySpark gives a stream writer no driver hook that knows the batch id), so its tasks do, with
a lock taken from a task. ``foreachBatch`` runs on the driver with the batch id, so here the
driver owns each batch's instant from first to last entry, as ``lakewarden.spark.write`` does
for a batch write, and the table, coordinator and commit client stay open across batches
(``_stream_session``, in the driver process):

1. **skip** a batch an earlier run of the query committed already: its (query id, batch id)
   is a completed instant's ``CommitStats.batch`` (the idempotence key, delta-rs's ``Txn``);
2. **open** the batch's instant: committer job set up, one lock and one ``requested`` append
   naming the batch (``SparkTransaction.begin_batch``, which finds the pending instant of
   this run's batch instead of opening a second one);
3. **write** under the instant's heartbeat, held by the driver (one heartbeat from the write
   to the end of the commit: every heartbeat started waits for its first beat to be
   acknowledged by the broker; the batches' heartbeats share the driver's heartbeat producer,
   ``lakewarden.clients.heartbeat.Heartbeats``):
   - ``python`` (``_python_tasks``): the ``lakewarden`` format's task code writes the rows in
     Spark's Python workers (pyarrow, the error table's bad-record routing, S3 uploads), each
     task committing its attempt, and returns the attempt's commit message to the driver;
   - ``spark`` (``_native``): Spark's own Parquet writer writes the rows; its committer
     promotes one attempt per task, which the driver adopts as a task attempt of the job;
4. **commit**: job commit of the accepted attempts, then ``completed`` with the batch key
   (``CommitStats.batch``), refused when another instant completed the batch (the ``once`` rule,
   re-checked after every rebase, by the driver or by job-committer);
5. **on failure**: the instant is rolled back (job abort: none of its files stays) and the
   error raised, which fails the query; Spark has not recorded the batch, so a restart redoes
   it under a new instant. A driver killed mid-batch leaves a pending instant whose heartbeat
   stops: the cleaner rolls it back; a driver killed after step 4 leaves a completed batch
   that the restart skips in step 1.

Which writer (``writer``): ``auto`` (default) and ``python`` take ``python``; ``spark`` takes
Spark's writer where ``_native`` can run for the table, its storage and settings and no
bad-record columns travel with the rows, and refuses the stream otherwise. ``python`` is the
default because it is the faster for micro-batches: Spark's writer pays for every file it
opens (a writer, its committer's task and job renames, the driver's adoption), and a
micro-batch writes one small file per task and file group (``python -m benchmarks ingest``
reports the per-batch times of both).

What the ``spark`` writer keeps per query, because every batch would pay it again: the
write's column expressions (``_native.meta_columns``: about 600 Py4J round trips to build,
reused while the batch's schema is the same; the instant enters as a literal column). Either
writer keeps the job-committer client (``_stream_session``; the first batch connects it while
its write runs). A batch of at most ``single_task_rows`` records (a setting, off by default;
counted from the checkpoint's offsets, ``_stream_offsets``, else bounded by
``max_batch_rows``) is written by one task, so it writes one file per file group instead of
one per task and file group (fewer, larger files; measured no faster on local[2]).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from pyspark.sql import DataFrame

import lakewarden.faults as faults
from lakewarden.spark import _job, _native, _python_tasks
from lakewarden.spark._native_columns import MetaColumns
from lakewarden.spark._options import (
    InvalidOptionError,
    WriteSpec,
    load_settings,
)
from lakewarden.spark._stream_offsets import batch_records
from lakewarden.spark._stream_session import StreamSession, stream_session
from lakewarden.spark._transaction import (
    BatchAlreadyCommittedError,
    BatchKey,
    SparkTransaction,
    completed_batch,
)
from lakewarden.table.config import ErrorTableChoice
from lakewarden.table.instant import Transition

log = logging.getLogger("lakewarden.spark")

OPERATION = "insert"
MicroBatchWriterKind = Literal["auto", "spark", "python"]
_QUERY_ID = "sql.streaming.queryId"
_RUN_ID = "spark.jobGroup.id"  # Structured Streaming runs a run's jobs in a group named by it
# Batches of at most this many records are written by one task (module docstring); 0 (the
# default): never. One task writes one file per file group instead of one per task and file
# group, but on local[2] it writes no faster (``python -m benchmarks ingest --quick``) and
# under load the query falls behind, which makes the end-to-end latency worse; so it is a
# setting, not a default.
SINGLE_TASK_ROWS = 0


@dataclass(frozen=True)
class BatchOutcome:
    """What ``MicroBatchWriter`` did with one micro-batch."""

    batch_id: int
    instant: str  # the batch's completed instant (this run's, or the earlier run's)
    skipped: bool  # committed by an earlier run: nothing written now
    writer: str  # "spark", "python", or "" when skipped
    # When Spark called the writer (epoch ms) and how long each step took (ms, monotonic
    # clock), in order: where a batch's time goes, for benchmarks and logs.
    called_ms: int = 0
    stages: tuple[StageTiming, ...] = ()
    total_ms: float = 0.0  # the whole call, stages and what lies between them
    # ``spark`` writer: the write's column expressions were the query's kept ones (not
    # rebuilt), and the batch was written by one task (``single_task_rows``).
    columns_reused: bool = False
    one_task: bool = False


class StageTiming(NamedTuple):
    """One step of a micro-batch: when it started after the call (ms) and how long it took."""

    name: str
    start_ms: float
    duration_ms: float


class StageClock:
    """Per-step timings of one micro-batch on the monotonic clock (``BatchOutcome``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.called_ms = time.time_ns() // 1_000_000
        self.stages: list[StageTiming] = []
        self._clock = clock
        self._start = clock()

    def elapsed_ms(self) -> float:
        return (self._clock() - self._start) * 1000

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block as step ``name`` (recorded also when the block raises)."""
        start = self.elapsed_ms()
        try:
            yield
        finally:
            self.stages.append(StageTiming(name, start, self.elapsed_ms() - start))


@dataclass
class MicroBatchWriter:
    """``foreachBatch`` function writing each micro-batch as one instant (module docstring).

    Held by the driver for the query's life: ``outcomes`` lists what the last 1000 batches
    did."""

    uri: str
    settings_json: str | None = None
    checkpoint: str = ""
    ingest_errors: bool = False  # the rows carry ``_bad_rows.INGEST_COLUMNS`` (error table)
    writer: MicroBatchWriterKind = "auto"
    # A batch of at most this many records is written by one task (0: never); its records
    # are counted from the checkpoint's Kafka offsets, else bounded by ``max_batch_rows``
    # (the query's ``maxOffsetsPerTrigger``, or ``maxFilesPerTrigger`` x rows per file).
    single_task_rows: int = SINGLE_TASK_ROWS
    max_batch_rows: int | None = None
    # Where the batches' bad records go (``lakewarden ingest --error-table``); None: the
    # table's config, else the settings.
    error_table: ErrorTableChoice | None = None
    outcomes: deque[BatchOutcome] = field(default_factory=lambda: deque(maxlen=1000))
    _spark_writes: bool = field(default=False, init=False, repr=False)
    _columns: MetaColumns | None = field(default=None, init=False, repr=False)
    _decided: bool = field(default=False, init=False, repr=False)
    _by_service: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.writer not in ("auto", "spark", "python"):
            raise InvalidOptionError(f"writer must be auto, spark or python, got {self.writer!r}")
        if self.single_task_rows < 0:
            raise InvalidOptionError(
                f"single_task_rows must be 0 (never) or more, got {self.single_task_rows}"
            )

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Steps 1-5 for micro-batch ``batch_id`` (on the driver, called by Spark).

        Raises: whatever the write or the commit raised (the instant rolled back), and
        InjectedFaultError (tests)."""
        clock = StageClock()
        key = self.batch_key(df, batch_id)
        with stream_session(self.uri, self.settings_json, key.query_id) as session:
            outcome = self._write(df, key, session, clock)
        outcome = dataclasses.replace(
            outcome,
            called_ms=clock.called_ms,
            stages=tuple(clock.stages),
            total_ms=clock.elapsed_ms(),
        )
        log.debug("micro-batch %s: %s", batch_id, outcome)
        self.outcomes.append(outcome)
        faults.point("spark.stream.after_batch_commit", batch=batch_id)

    def batch_key(self, df: DataFrame, batch_id: int) -> BatchKey:
        """The batch's identity from the driver thread's local properties, which Structured
        Streaming sets before it calls ``foreachBatch``.

        Raises: InvalidOptionError (called outside a streaming query)."""
        context = df.sparkSession.sparkContext
        query = context.getLocalProperty(_QUERY_ID)
        if query is None:
            raise InvalidOptionError(
                "MicroBatchWriter is a foreachBatch function: it runs inside a streaming query"
            )
        run = context.getLocalProperty(_RUN_ID) or "unknown-run"
        return BatchKey(query_id=query, run_id=run, batch_id=batch_id, checkpoint=self.checkpoint)

    def _write(
        self, df: DataFrame, key: BatchKey, session: StreamSession, clock: StageClock
    ) -> BatchOutcome:
        table = session.table
        with clock.stage("skip_check"):
            done = completed_batch(table.timeline.load(), key)  # 1.
        if done is not None:
            log.info("micro-batch %s committed by %s already: skipped", key.batch_id, done.instant)
            return BatchOutcome(key.batch_id, done.instant, skipped=True, writer="")
        native = self._native(table)
        if self._by_service:
            session.connect_ahead()  # the first batch's write overlaps the client's start
        try:
            with clock.stage("open"):
                spec, txn = self._open(table, key)  # 2.
        except BatchAlreadyCommittedError as err:  # completed since step 1 (another query)
            return BatchOutcome(key.batch_id, err.committed_by, skipped=True, writer="")
        reused = False
        try:
            with clock.stage("plan"):
                one_task = self.one_task(key.batch_id)
                rows = df.coalesce(1) if one_task else df
                if native:
                    kept = self._columns
                    self._columns = _native.meta_columns(df, table.config, spec, kept)
                    reused = self._columns is kept
            # 3. and 4. under one heartbeat (its stop falls in "untimed")
            with ExitStack() as beating:
                with clock.stage("heartbeat_start"):
                    beating.enter_context(txn.heartbeat())
                if native:
                    with clock.stage("spark_write"):
                        _native.write_files(rows, table.config, spec, table.storage, self._columns)
                    with clock.stage("adopt"):
                        messages = [_native.adopt_files(table.storage, table.config, spec)]
                else:
                    with clock.stage("python_write"):
                        messages = _python_tasks.write(rows, spec, table.config)
                client = session.commit_client() if self._by_service else None
                with clock.stage("commit"):
                    _job.commit_write(
                        spec, messages, batch=key, table=table, client=client, beating=True
                    )
        except BaseException as err:
            settled = self._settled(table, spec, key, err)
            if settled is not None:
                return settled
            raise
        return BatchOutcome(
            key.batch_id,
            spec.instant,
            skipped=False,
            writer=_kind(native),
            columns_reused=reused,
            one_task=one_task,
        )

    def one_task(self, batch_id: int) -> bool:
        """Whether batch ``batch_id`` is small enough to be written by one task: its record
        count from the checkpoint's offsets, else the query's cap, at most
        ``single_task_rows``; False when neither is known."""
        if self.single_task_rows == 0:
            return False
        rows = batch_records(self.checkpoint, batch_id)
        if rows is None:
            rows = self.max_batch_rows
        return rows is not None and rows <= self.single_task_rows

    def _open(self, table: _job.TableHandle, key: BatchKey) -> tuple[WriteSpec, SparkTransaction]:
        """Step 2. Raises: BatchAlreadyCommittedError, LockTimeoutError, ..."""
        batch = _job.open_batch(table, key, OPERATION)
        spec = WriteSpec(
            self.uri,
            batch.instant,
            batch.job_id,
            OPERATION,
            self.settings_json,
            ingest_errors=self.ingest_errors,
            error_table=self.error_table,
        )
        return spec, table.transaction(spec)

    def _native(self, table: _job.TableHandle) -> bool:
        """Whether the rows go through Spark's Parquet writer: only when asked for
        (``writer="spark"``); decided once per query.

        Raises: InvalidOptionError (``writer="spark"`` where it cannot run)."""
        if not self._decided:
            settings = load_settings(self.settings_json)
            self._by_service = settings.kafka.commits_by_service
            if self.writer == "spark":
                reason = _native.unsupported_reason(table.config, settings, table.storage)
                if reason is None and self.ingest_errors:
                    reason = "bad records go to the error table (routed in Python)"
                if reason is not None:
                    raise InvalidOptionError(
                        f"writer=spark cannot be used for this stream: {reason}"
                    )
            self._spark_writes, self._decided = self.writer == "spark", True
        return self._spark_writes

    def _settled(
        self, table: _job.TableHandle, spec: WriteSpec, key: BatchKey, err: BaseException
    ) -> BatchOutcome | None:
        """After a failure: the batch's outcome when it is committed all the same (this
        instant completed before Spark reported the failure, or the ``once`` rule refused
        because another instant completed the batch); else None, with this instant rolled
        back if it is still pending (step 5: the commit's own failure rolled it back
        already)."""
        state = table.timeline.load()
        mine = state.get(spec.instant)
        if mine is not None and mine.state is Transition.COMPLETED:
            log.warning("instant %s completed, but then: %r", spec.instant, err)
            return BatchOutcome(key.batch_id, spec.instant, skipped=False, writer="")
        done = completed_batch(state, key)
        if done is not None:  # (our instant was rolled back by the refusal)
            return BatchOutcome(key.batch_id, done.instant, skipped=True, writer="")
        if mine is not None and mine.is_pending:
            _job.abandon(table, spec, err)
        return None


def _kind(native: bool) -> str:
    return "spark" if native else "python"
