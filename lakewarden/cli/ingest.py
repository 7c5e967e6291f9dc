"""``lakewarden ingest``: stream a Kafka topic into a lakewarden table with Spark.

    lakewarden ingest --topic orders --table ./tables/orders                 # until Ctrl-C
    lakewarden ingest --topic orders --table ./tables/orders --max-batches 3 --trigger 2s
    lakewarden ingest --topic orders --table ./tables/orders --trigger available-now

Runs a local Spark Structured Streaming query (``lakewarden.spark.ingest``): JSON values (or,
with ``--format avro``, single-object-encoded Avro records of the table's schema) are parsed
into the table schema and every micro-batch is one instant. Commits are coordinated as
configured (``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS`` set: timeline-lock and heartbeat-monitor;
unset: the embedded coordinator). The Kafka source's jars come from ``make spark-jars``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

import click
from rich.console import Console

from lakewarden.errors import RetryableError
from lakewarden.extras import require_extra
from lakewarden.names import InvalidNameError, check_topic_name
from lakewarden.settings import Settings

if TYPE_CHECKING:  # Spark is imported only when the command runs
    from lakewarden.spark.ingest import BadRecords, BatchReport, IngestJob, IngestTotals

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m)$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0}
AVAILABLE_NOW = "available-now"


def parse_trigger(text: str) -> float | None:
    """``"5s"``, ``"500ms"``, ``"1m"`` -> seconds; ``"available-now"`` -> None.

    Raises: click.BadParameter."""
    if text.lower() in (AVAILABLE_NOW, "once"):
        return None
    match = _DURATION.match(text.strip().lower())
    if match is None or float(match.group(1)) <= 0:
        raise click.BadParameter(
            f"{text!r} is not a trigger: use a duration such as 5s, 500ms or 1m, "
            f"or {AVAILABLE_NOW} (what the topic holds now, then stop)."
        )
    return float(match.group(1)) * _UNITS[match.group(2)]


def check_broker(settings: Settings, servers: str) -> None:
    """Ask the broker for its metadata once, within the Kafka client's request timeout, so an
    unreachable broker is one line now instead of minutes of Spark retries and a Java trace.

    Raises: RetryableError (no answer), KafkaAuthenticationError (credentials refused)."""
    require_extra("kafka", "Kafka support")
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    from lakewarden.events.kafka_errors import AuthWatch

    timeout = settings.kafka.request_timeout_s
    kafka = settings.kafka.model_copy(update={"bootstrap_servers": servers})  # --bootstrap wins
    config = kafka.librdkafka_config()
    # librdkafka's own connection-refused lines would repeat the one error below.
    config["log_level"] = 0
    watch = AuthWatch(kafka)
    config["error_cb"] = watch
    admin = AdminClient(config)
    try:
        admin.list_topics(timeout=timeout)
    except KafkaException as err:
        admin.poll(0)  # serve the error events: a refused login is one of them
        watch.raise_if_refused()
        raise RetryableError(
            f"Kafka at {servers} did not answer within {timeout:g} s ({err.args[0]}). "
            "Help: is the broker up? (--bootstrap, LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS, "
            "LAKEWARDEN_KAFKA__REQUEST_TIMEOUT_S)"
        ) from err


def batch_line(report: BatchReport) -> str:
    """One line of the progress display."""
    bad = f"[yellow]{report.bad_rows}[/]" if report.bad_rows else "0"
    instant = report.instant or "[dim]none (no rows to write)[/]"
    return (
        f"[bold]batch {report.batch_id}[/]  read {report.input_rows}  "
        f"written [green]{report.written_rows}[/]  bad {bad}  instant {instant}  "
        f"{report.duration_ms / 1000:.1f} s"
    )


def run_with_progress(
    job: IngestJob,
    console: Console,
    *,
    max_batches: int | None = None,
    stop_when: Callable[[IngestTotals], bool] | None = None,
    timeout_s: float | None = None,
) -> IngestTotals:
    """Run ``job`` with a line per micro-batch and a live status of the totals.

    Raises: IngestError."""
    spec = job.spec
    heading = f"ingesting topic [bold]{spec.topic}[/] into {spec.table}"
    with console.status(f"{heading}: waiting for the first micro-batch ...") as status:

        def on_batch(report: BatchReport) -> None:
            console.print(batch_line(report))
            totals = job.totals
            status.update(
                f"{heading}: {totals.batches} batches, {totals.written_rows} rows written, "
                f"{totals.bad_rows} bad, last instant {totals.last_instant or '-'}"
            )

        return job.run(
            on_batch=on_batch, max_batches=max_batches, stop_when=stop_when, timeout_s=timeout_s
        )


def bad_records_policy(chosen: str | None, settings: Settings) -> BadRecords:
    """``--bad-records``, defaulting to the error table when it is enabled."""
    if chosen is None:
        return "error-table" if settings.error_table.enabled else "fail"
    return cast("BadRecords", chosen)


def summary(totals: IngestTotals, bad_dir: Path, policy: str = "skip") -> str:
    where = ""
    if totals.bad_rows:
        where = " -> the error table (lakewarden errors show)" if policy == "error-table" else ""
        where = where or f" -> {bad_dir}"
    return (
        f"ingested {totals.batches} micro-batches: {totals.input_rows} records read, "
        f"{totals.written_rows} rows written, {totals.bad_rows} bad records{where}; "
        f"last instant {totals.last_instant or '-'}"
    )


def topic_param(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A click callback: the topic must be a legal Kafka topic (a usage error, exit 2).

    Raises: click.BadParameter."""
    try:
        return check_topic_name(value)
    except InvalidNameError as err:
        raise click.BadParameter(str(err)) from None


@click.command()
@click.option("--topic", required=True, callback=topic_param, help="Kafka topic to read.")
@click.option("--table", "table_uri", required=True, help="URI of an existing lakewarden table.")
@click.option(
    "--format",
    "value_format",
    type=click.Choice(["json", "avro"]),
    default="json",
    show_default=True,
    help="Encoding of the record values. avro: one record of the table's schema per value, "
    "single-object encoded (lakewarden.spark.ingest.AvroValueCodec writes them).",
)
@click.option(
    "--trigger",
    default="5s",
    show_default=True,
    help=f"Micro-batch interval (5s, 500ms, 1m), or {AVAILABLE_NOW}: what the topic holds "
    "now, then stop.",
)
@click.option("--max-batches", type=click.IntRange(min=1), default=None, help="Stop after N.")
@click.option(
    "--max-records-per-batch",
    type=click.IntRange(min=1),
    default=None,
    help="At most N Kafka records per micro-batch (Spark's maxOffsetsPerTrigger).",
)
@click.option(
    "--bootstrap",
    default=None,
    help="Kafka bootstrap servers of the topic. [LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS]",
)
@click.option(
    "--checkpoint",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Spark checkpoint folder (local). [<state dir>/ingest/<table name>-<id>/<topic>]",
)
@click.option(
    "--bad-records",
    type=click.Choice(["fail", "skip", "error-table"]),
    default=None,
    help="fail: stop at the first bad record, naming it; skip: write bad records to "
    "<checkpoint>/_bad_records/ and count them; error-table: publish them (with their Kafka "
    "topic, partition and offset) to the table's error table, committed with the "
    "micro-batch. [default: error-table when LAKEWARDEN_ERROR_TABLE__ENABLED, else fail]",
)
@click.option(
    "--error-table",
    "error_table",
    type=click.Choice(["local", "global"]),
    default=None,
    help="With --bad-records error-table: the table's own <table>_errors (local) or the global "
    "one of LAKEWARDEN_ERROR_TABLE__NAME / __BASE_PATH (global). [default: the table's "
    "config, else the settings]",
)
@click.option(
    "--starting-offsets",
    type=click.Choice(["earliest", "latest"]),
    default="earliest",
    show_default=True,
    help="Where a new checkpoint starts reading (a checkpoint's own offsets win).",
)
@click.option(
    "--single-task-rows",
    type=click.IntRange(min=0),
    default=None,
    help="A micro-batch of at most N records is written by one Spark task (one file per file "
    "group instead of one per task and file group). [default: 0, never]",
)
@click.option("--master", default="local[2]", show_default=True, help="Spark master.")
def command(
    topic: str,
    table_uri: str,
    value_format: str,
    trigger: str,
    max_batches: int | None,
    max_records_per_batch: int | None,
    bootstrap: str | None,
    checkpoint: Path | None,
    bad_records: str | None,
    error_table: str | None,
    starting_offsets: str,
    single_task_rows: int | None,
    master: str,
) -> None:
    """Stream a Kafka topic into a lakewarden table: one instant per micro-batch."""
    from lakewarden.spark.ingest import IngestJob, IngestSpec, default_checkpoint, ingest_session
    from lakewarden.storage import open_storage
    from lakewarden.table.config import ErrorTableChoice, load_config

    trigger_s = parse_trigger(trigger)
    settings = Settings()
    servers = bootstrap or settings.kafka.bootstrap_servers
    if not servers:
        raise click.UsageError(
            "no Kafka to read from: pass --bootstrap HOST:PORT or set "
            "LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS."
        )
    console = Console()
    config = load_config(open_storage(table_uri, settings))
    check_broker(settings, servers)
    spec = IngestSpec(
        topic=topic,
        table=table_uri,
        bootstrap=servers,
        checkpoint=(checkpoint or default_checkpoint(settings, config, topic)).resolve(),
        trigger_s=trigger_s,
        max_records_per_batch=max_records_per_batch,
        bad_records=bad_records_policy(bad_records, settings),
        starting_offsets=starting_offsets,
        value_format="avro" if value_format == "avro" else "json",
        error_table=None if error_table is None else ErrorTableChoice(kind=error_table),
    )
    if single_task_rows is not None:
        spec = dataclasses.replace(spec, single_task_rows=single_task_rows)
    console.print(f"checkpoint {spec.checkpoint}")
    with console.status("starting Spark (local) ..."):
        spark = ingest_session(master=master)
    try:
        job = IngestJob.start(spark, spec)
        try:
            totals = run_with_progress(job, console, max_batches=max_batches)
        except KeyboardInterrupt:
            job.stop()
            totals = job.totals
            console.print("[yellow]interrupted[/]")
        console.print(summary(totals, spec.bad_records_dir, spec.bad_records))
    finally:
        spark.stop()
