"""Streaming ingestion: a Kafka topic into a lakewarden table (``lakewarden ingest``).

    spark = ingest_session()                             # local Spark with the Kafka source
    job = IngestJob.start(spark, IngestSpec(topic="orders", table=uri, bootstrap=servers))
    totals = job.run(on_batch=print, max_batches=5)      # one BatchReport per micro-batch
    job.stop()

One Structured Streaming query; each micro-batch goes through these steps:

1. **read** the topic with Spark's Kafka source (``spark-sql-kafka``, local jars fetched by
   ``make spark-jars``; see ``kafka_jars``), from the earliest offset on a first run, from the
   checkpoint's offsets after that, at most ``max_records_per_batch`` records per batch;
2. **parse** each value as a UTF-8 JSON object into the table schema (``parse_records``: Spark's
   ``from_json``, permissive, with a corrupt-record column). Fields not in the table are
   ignored; a missing nullable field is null. With ``value_format="avro"`` each value is one
   Avro record of the table's schema in single-object encoding, decoded in Python
   (``AvroValueCodec``; ``AvroValueCodec.for_table(config).encode(row)`` produces such values);
3. **classify**: a record is *bad* when its value is null, is not a JSON object, has a field
   whose value does not fit the table type, lacks the record key, or lacks a required field;
4. **bad records**, by ``bad_records``:
   - ``fail``: the batch fails on the first bad record, naming its topic, partition, offset and
     reason; Spark aborts the batch and the writer rolls its instant back. Nothing is lost:
     the query stops and a restart begins at that batch again;
   - ``skip``: the task that meets them writes them, with their Kafka coordinates and reason,
     to ``<checkpoint>/_bad_records/batch-<B>/part-<P>.jsonl`` and leaves them out of the
     write. A batch's offsets are fixed by the checkpoint before it runs, so a rerun of the
     batch rewrites the same files with the same lines (written to a temporary name, then
     renamed): each bad record is in exactly one line. ``BatchReport.bad_rows`` counts them;
   - ``error-table`` (needs ``error_table.enabled``): the writer's task attempt publishes each
     as an ``ErrorRecord`` (the raw key and value, the reason, the Kafka topic, partition and
     offset in ``context``) under the micro-batch's instant, and counts them in the commit's
     ``failed_records``; the error-table sink commits exactly the records of the attempts the
     instant accepted, so each bad record is in the error table once even when a batch is
     rerun. ``BatchReport.bad_rows`` is the commit's ``failed_records``;
5. **write** the good rows in ``foreachBatch`` (``_micro_batch.MicroBatchWriter``): the driver
   opens one instant per micro-batch (one lock and one append), the format's task code writes
   the rows in Spark's Python workers and returns each task's commit message to the driver,
   and the driver's commit records (query id, batch id) so a batch is committed once per query
   even across restarts and kills. The table, coordinator and commit client stay
   open for the next batch.

The checkpoint location defaults to ``<state dir>/ingest/<table name>-<table id>/<topic>``
(local filesystem: ``LAKEWARDEN_STATE_DIR``, ``.lakewarden-state`` by default), so a second
run with the same table and topic continues where the first stopped.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from lakewarden.errors import ConfigurationError, NonRetryableError
from lakewarden.names import check_table_name, check_topic_name, child_folder
from lakewarden.settings import Settings
from lakewarden.spark._arrow import check_write_schema, spark_schema
from lakewarden.spark._bad_rows import INGEST_COLUMNS
from lakewarden.spark._ingest_avro import AvroSchemaError, AvroValueCodec, avro_schema
from lakewarden.spark._ingest_records import (
    BadRecords,
    ValueFormat,
    bad_record_files,
    parse_records,
    read_bad_records,
    route_bad_records,
)
from lakewarden.spark._micro_batch import SINGLE_TASK_ROWS, MicroBatchWriter, MicroBatchWriterKind
from lakewarden.spark._options import encode_settings
from lakewarden.spark._query_progress import ProgressReader
from lakewarden.spark._stream_session import close_query_sessions
from lakewarden.spark._transaction import BatchKey, completed_batch
from lakewarden.storage import Storage, open_storage
from lakewarden.table.config import ErrorTableChoice, TableConfig, load_config
from lakewarden.table.stats import CommitStats
from lakewarden.table.timeline import Timeline

BAD_RECORDS_DIR = "_bad_records"
JARS_ENV = "LAKEWARDEN_SPARK_JARS"

__all__ = [
    "BAD_RECORDS_DIR",
    "SINGLE_TASK_ROWS",
    "AvroSchemaError",
    "AvroValueCodec",
    "BadRecords",
    "BatchReport",
    "ErrorTableDisabledError",
    "IngestError",
    "IngestJob",
    "IngestSpec",
    "IngestTotals",
    "KafkaJarsMissingError",
    "ValueFormat",
    "avro_schema",
    "bad_record_files",
    "default_checkpoint",
    "ingest_session",
    "kafka_jars",
    "parse_records",
    "read_bad_records",
    "route_bad_records",
]


class IngestError(NonRetryableError):
    """The ingestion query failed (a bad record with ``fail``, a write that did not commit)."""


class ErrorTableDisabledError(ConfigurationError):
    """``bad_records="error-table"`` with the error table not enabled."""


class KafkaJarsMissingError(ConfigurationError):
    """Spark's Kafka source jars are not where ``kafka_jars`` looks."""


def default_jars_dir() -> Path:
    """``Settings().spark_jars`` (``$LAKEWARDEN_SPARK_JARS``), else ``infra/spark/jars`` of the
    source tree."""
    configured = Settings().spark_jars
    if configured:
        return configured
    return Path(__file__).resolve().parents[2] / "infra" / "spark" / "jars"


def kafka_jars(directory: Path | None = None) -> list[Path]:
    """The jars of Spark's Kafka source, as local files for ``spark.jars``.

    Raises: KafkaJarsMissingError (with the command that fetches them)."""
    folder = directory or default_jars_dir()
    jars = sorted(folder.glob("*.jar")) if folder.is_dir() else []
    if not any(jar.name.startswith("spark-sql-kafka-0-10_") for jar in jars):
        raise KafkaJarsMissingError(
            f"Spark's Kafka source jars are not in {folder}. Help: run `make spark-jars` "
            f"(Maven fetches them from Maven Central into infra/spark/jars), or point {JARS_ENV} "
            "at a folder holding spark-sql-kafka-0-10 and its dependencies."
        )
    return jars


def ingest_session(
    *,
    master: str = "local[2]",
    app_name: str = "lakewarden-ingest",
    jars: list[Path] | None = None,
    local_dir: Path | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A local SparkSession with the Kafka source jars (local files, never Ivy) and the
    ``lakewarden`` format; ``conf``: more session settings (another sink's extensions, say).
    Python workers run this interpreter and are forked from lakewarden's daemon
    (``lakewarden.spark.daemon``: a worker Spark starts after an idle minute does not import
    lakewarden again). Raises: KafkaJarsMissingError."""
    from lakewarden.spark import register
    from lakewarden.spark.daemon import DAEMON_MODULE, DAEMON_OPTION

    paths = jars if jars is not None else kafka_jars()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # every server on the loopback
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.jars", ",".join(str(p.resolve()) for p in paths))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if local_dir is not None:
        builder = builder.config("spark.local.dir", str(local_dir))
    for name, value in {DAEMON_OPTION: DAEMON_MODULE, **(conf or {})}.items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


@dataclass(frozen=True)
class IngestSpec:
    """One ingestion: which topic into which table, and how."""

    topic: str
    table: str
    bootstrap: str
    checkpoint: Path
    trigger_s: float | None = 5.0  # None: process what the topic holds now, then stop
    max_records_per_batch: int | None = None
    bad_records: BadRecords = "fail"
    starting_offsets: str = "earliest"
    value_format: ValueFormat = "json"
    settings: Settings | None = None  # for the writer's processes (default: their environment)
    writer: MicroBatchWriterKind = "auto"  # who writes the rows (``_micro_batch``)
    # A micro-batch of at most this many records is written by one Spark task (``_micro_batch``)
    single_task_rows: int = SINGLE_TASK_ROWS
    # Where bad records go with ``error-table`` (local or global); None: the table's config,
    # else the settings (``lakewarden.errortable.location``).
    error_table: ErrorTableChoice | None = None

    def __post_init__(self) -> None:
        check_topic_name(self.topic)  # an illegal topic would make the Kafka source wait forever

    @property
    def bad_records_dir(self) -> Path:
        return self.checkpoint / BAD_RECORDS_DIR


def default_checkpoint(settings: Settings, config: TableConfig, topic: str) -> Path:
    """``<state dir>/ingest/<table name>-<table id>/<topic>`` (absolute): one per table (two
    tables of one name never share a checkpoint) and topic. Always inside the state folder.

    Raises: InvalidNameError (a topic or table name that is no folder name, or a path that
    resolves outside ``<state dir>/ingest``)."""
    check_topic_name(topic)
    check_table_name(config.name)  # a table.json written by hand is not checked at create
    return child_folder(settings.state_dir / "ingest", f"{config.name}-{config.table_id}", topic)


@dataclass(frozen=True)
class BatchReport:
    """What one micro-batch did."""

    batch_id: int
    input_rows: int  # Kafka records read
    written_rows: int  # rows in the batch's instant
    bad_rows: int  # left out (``skip``): lines in the batch's bad-record files
    instant: str | None  # the completed instant (None: nothing to write)
    duration_ms: int
    add_batch_ms: int  # Spark's addBatch: the tasks' writes and the commit
    started_ms: int = 0  # when the trigger fired (epoch ms)


@dataclass
class IngestTotals:
    batches: int = 0
    input_rows: int = 0
    written_rows: int = 0
    bad_rows: int = 0
    last_instant: str | None = None
    reports: list[BatchReport] = field(default_factory=list)

    def add(self, report: BatchReport) -> None:
        self.batches += 1
        self.input_rows += report.input_rows
        self.written_rows += report.written_rows
        self.bad_rows += report.bad_rows
        self.last_instant = report.instant or self.last_instant
        self.reports.append(report)


class IngestJob:
    """A running ingestion query and what it has done so far."""

    def __init__(
        self,
        spark: SparkSession,
        spec: IngestSpec,
        query: StreamingQuery,
        storage: Storage,
        config: TableConfig,
        writer: MicroBatchWriter | None = None,
    ) -> None:
        self.spark = spark
        self.spec = spec
        self.query = query
        # The query's foreachBatch function (driver side): ``writer.outcomes`` says what each
        # batch did and where its time went.
        self.writer = writer
        self.query_id = str(query.id)
        self.timeline = Timeline(storage, table=config.name)
        self.totals = IngestTotals()
        self._seen = -1
        self._progress = ProgressReader(query)

    @classmethod
    def start(cls, spark: SparkSession, spec: IngestSpec) -> IngestJob:
        """Start the query (steps 1-5). Raises: NotATableError, KafkaJarsMissingError,
        SchemaMismatchError, AvroSchemaError, ErrorTableDisabledError."""
        if (
            spec.bad_records == "error-table"
            and not (spec.settings or Settings()).error_table.enabled
        ):
            raise ErrorTableDisabledError(
                "bad records cannot go to the error table: it is not enabled. Help: set "
                "LAKEWARDEN_ERROR_TABLE__ENABLED=true (and run the error-sink service), or "
                "use --bad-records fail|skip.",
                table=spec.table,
            )
        encoded = _encoded(spec.settings)
        storage = open_storage(spec.table, spec.settings)
        config = load_config(storage)
        reader = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", spec.bootstrap)
            .option("subscribe", spec.topic)
            .option("startingOffsets", spec.starting_offsets)
        )
        if spec.max_records_per_batch is not None:
            reader = reader.option("maxOffsetsPerTrigger", str(spec.max_records_per_batch))
        try:
            raw = reader.load()
        except Exception as err:  # AnalysisException: the session has no Kafka source
            if "kafka" not in str(err).lower():
                raise
            raise KafkaJarsMissingError(
                f"this SparkSession has no Kafka source ({err}). Help: build it with "
                "lakewarden.spark.ingest.ingest_session(), or add kafka_jars() to spark.jars."
            ) from err
        names = spark_schema(config.pa_schema).fieldNames()
        parsed = parse_records(raw, config, spec.value_format)
        good = route_bad_records(parsed, spec.bad_records, spec.bad_records_dir, names)
        errors = spec.bad_records == "error-table"
        check_write_schema(good.schema, config, "insert", ignore=INGEST_COLUMNS if errors else ())
        batches = MicroBatchWriter(
            spec.table,
            settings_json=encoded,
            checkpoint=str(spec.checkpoint),
            ingest_errors=errors,
            writer=spec.writer,
            single_task_rows=spec.single_task_rows,
            max_batch_rows=spec.max_records_per_batch,
            error_table=spec.error_table,
        )
        writer = (
            good.writeStream.foreachBatch(batches)
            .queryName(f"lakewarden-ingest-{spec.topic}")
            .option("checkpointLocation", str(spec.checkpoint))
        )
        if spec.trigger_s is None:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{int(spec.trigger_s * 1000)} milliseconds")
        return cls(spark, spec, writer.start(), storage, config, batches)

    def poll(self) -> list[BatchReport]:
        """Reports of the batches finished since the last poll. Raises: IngestError."""
        # Executed batches only: an idle trigger also reports progress (every 10 s), with the
        # id of the batch to come and no addBatch.
        progress = [
            p
            for p in self._progress.new()
            if p.batchId > self._seen and "addBatch" in (p.durationMs or {})
        ]
        reports = [self._report(p) for p in sorted(progress, key=lambda p: p.batchId)]
        for report in reports:
            self._seen = report.batch_id
            self.totals.add(report)
        if not reports:
            self._raise_if_failed()
        return reports

    def run(
        self,
        *,
        on_batch: Callable[[BatchReport], None] | None = None,
        max_batches: int | None = None,
        stop_when: Callable[[IngestTotals], bool] | None = None,
        timeout_s: float | None = None,
        poll_s: float = 0.5,
    ) -> IngestTotals:
        """Report batches until ``max_batches`` ran, ``stop_when(totals)`` holds, the query
        ended by itself (available-now trigger) or ``timeout_s`` passed; the query is stopped
        then. A batch that started meanwhile is interrupted: Spark aborts it, its instant is
        rolled back, and the next run redoes it from the checkpoint.

        Raises: IngestError (the query failed; it is stopped)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            while True:
                active = self.query.isActive
                for report in self.poll():
                    if on_batch is not None:
                        on_batch(report)
                if (
                    not active
                    or (max_batches is not None and self.totals.batches >= max_batches)
                    or (stop_when is not None and stop_when(self.totals))
                    or (deadline is not None and time.monotonic() >= deadline)
                ):
                    break
                self._wait_for_end(poll_s)
        finally:
            self.stop()
        self._raise_if_failed()
        return self.totals

    def _wait_for_end(self, seconds: float) -> None:
        """Up to ``seconds``, returning as soon as the query ends: an available-now run is
        done when its last batch is, not up to a poll interval later."""
        try:
            # Seconds as a float, though PySpark's hint says int: it waits int(timeout * 1000) ms.
            self.query.awaitTermination(seconds)  # type: ignore[arg-type]
        except StreamingQueryException:
            pass  # the query failed: the next poll raises it, as IngestError

    def stop(self) -> None:
        """Stop the query, then close what its micro-batches kept open in this process (the
        table and the job-committer client: ``_stream_session``)."""
        if self.query.isActive:
            self.query.stop()
        close_query_sessions(self.query_id)

    def _report(self, progress: Any) -> BatchReport:
        batch = int(progress.batchId)
        done = completed_batch(self.timeline.load(), BatchKey(self.query_id, "", batch))
        commit = done.commit if done is not None else None
        # Input records of the instant less those it set aside for the error table.
        taken = (commit.input_records or 0) if commit is not None else 0
        failed = commit.failed_records if commit is not None else 0
        durations = progress.durationMs or {}
        return BatchReport(
            batch_id=batch,
            input_rows=int(progress.numInputRows),
            written_rows=taken - failed,
            bad_rows=self._bad_rows(batch, commit),
            instant=done.instant if done is not None else None,
            duration_ms=int(durations.get("triggerExecution", 0)),
            add_batch_ms=int(durations.get("addBatch", 0)),
            started_ms=_epoch_ms(progress.timestamp),
        )

    def _bad_rows(self, batch: int, commit: CommitStats | None) -> int:
        if self.spec.bad_records == "error-table":
            return commit.failed_records if commit is not None else 0
        return len(read_bad_records(self.spec.bad_records_dir, batch))

    def _raise_if_failed(self) -> None:
        err = self.query.exception()
        if err is not None:
            raise IngestError(
                f"ingestion of topic {self.spec.topic} into {self.spec.table} failed: "
                f"{spark_error_summary(str(err))}",
                table=self.spec.table,
            ) from err


# A failed query's text quotes its plan, whose bad-record branch holds our message template
# between attribute ids (``topic#9``): such lines name no actual record.
_PLAN_TEXT = re.compile(r"\w#\d+")
# The last line of a Python traceback raised by lakewarden (``lakewarden.errors.XError: ...``).
_OUR_EXCEPTION = re.compile(r"^lakewarden\.[\w.]+: ")


def spark_error_summary(text: str) -> str:
    """The telling line of a Spark failure: ours (a bad record, a lakewarden exception) first;
    lines of the quoted query plan never."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    ours = [line for line in lines if not _PLAN_TEXT.search(line)]
    bad_record = "lakewarden ingest: bad record"
    found = (
        next((line for line in ours if bad_record in line), None)
        or next((line for line in ours if _OUR_EXCEPTION.match(line)), None)
        or next(
            (line for m in ("lakewarden", "Error: ", "Exception: ") for line in ours if m in line),
            None,
        )
    )
    if found is None:
        return lines[0][:1000] if lines else "unknown error"
    start = found.find("lakewarden ingest:") if "lakewarden ingest:" in found else 0
    return found[start:].removesuffix(" SQLSTATE: P0001")[:1000]


def _epoch_ms(timestamp: str | None) -> int:
    """Spark's progress timestamp (``2025-03-14T09:26:53.589Z``) in epoch ms; 0 if absent."""
    if not timestamp:
        return 0
    parsed = dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return int(parsed.timestamp() * 1000)


def _encoded(settings: Settings | None) -> str | None:
    return encode_settings(settings) if settings is not None else None
