"""``make demo``: streaming ingestion from Kafka into a lakewarden table, and what the services
did for it.

1. brings the local stack up in its own temporary state folder, on free ports: Kafka and every
   registered service, so it never collides with a stack a developer already runs;
2. creates an ``orders`` table (partitioned by region, 2 buckets) with the error table on;
3. runs ``STEPS``, a list of (title, function) pairs run in order on one ``Demo``:
   - ingest: a stream of order events in waves, a few malformed, ingested by Spark Structured
     Streaming (``lakewarden.spark.ingest``, bad records to the error table), a line per
     micro-batch;
   - the timeline, and the rows read back by Python and by Spark;
   - what the services did for one micro-batch, from their events (``lakewarden history``):
     timeline-lock's grant and fencing token, the heartbeats heartbeat-monitor saw, the job
     commit job-committer ran;
   - the bad records, committed by error-sink into the error table (``lakewarden errors show``);
   - a writer killed mid-batch (SIGKILL) whose instant heartbeat-monitor declares dead;
   - the cleaner: a clean keeping the latest commit, which also rolls the dead write back;
   - ``lakewarden explain`` of the instant most worth explaining (the killed writer's);
4. brings the stack down, whatever happened, and deletes the temporary folder.

Spark's and the library's log lines go to a log file named at the end, not to the terminal.
To add a step: write ``def step_x(demo: Demo) -> None`` and append ``("title", step_x)`` to
``STEPS``; ``demo`` holds the settings, the table, the ingestion and the checks' results.
The order events and the topic helpers are here for tests and benchmarks too.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
from rich.console import Console
from rich.table import Table as RichTable

from lakewarden.api.connection import close_shared_connections
from lakewarden.api.table import Table
from lakewarden.devstack import SERVICES, DevSettings, DevStack
from lakewarden.settings import ErrorTableSettings, KafkaSettings, Settings
from lakewarden.table.clean.policy import CleanPolicy

if TYPE_CHECKING:  # Spark is imported when the demo ingests
    from lakewarden.spark.ingest import IngestSpec

console = Console()
TOPIC = "demo.orders"
PARTITIONS = 2
WAVES = 4
EVENTS_PER_WAVE = 150
WAVE_PAUSE_S = 1.5
REGIONS = ("eu", "us", "apac")
ORDERS_SCHEMA = pa.schema(
    [
        pa.field("order_id", pa.string(), nullable=False),
        ("region", pa.string()),
        ("customer", pa.string()),
        ("amount", pa.float64()),
        ("updated_at", pa.int64()),
    ]
)
# One of each kind of bad record, at fixed places of the stream: (event index, value).
MALFORMED: dict[int, bytes] = {
    17: b"this is not json",
    170: b'{"region": "eu", "customer": "c-1", "amount": 12.5, "updated_at": 1}',
    333: b'{"order_id": "o-bad-amount", "region": "us", "amount": "a lot", "updated_at": 2}',
    480: b'{"order_id": "o-truncated", "region": "eu", "amo',
    555: b"[1, 2, 3]",
}


def order_events(count: int, *, seed: int = 7, malformed: bool = True) -> list[bytes]:
    """``count`` JSON order events (unique order ids); the ``MALFORMED`` ones replace the
    events at their indexes (when ``malformed`` and within ``count``)."""
    rng = random.Random(seed)
    events = []
    for i in range(count):
        if malformed and i in MALFORMED:
            events.append(MALFORMED[i])
            continue
        order = {
            "order_id": f"o-{i:06d}",
            "region": REGIONS[i % len(REGIONS)],
            "customer": f"c-{rng.randrange(1000):03d}",
            "amount": round(rng.uniform(5, 500), 2),
            "updated_at": 1_700_000_000_000 + i,
        }
        events.append(json.dumps(order).encode())
    return events


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    """Create ``topic`` (replication 1) unless it exists. Raises: KafkaException."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        try:
            future.result(30)
        except KafkaException as err:
            if err.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


def produce(bootstrap: str, topic: str, values: Sequence[bytes]) -> None:
    """Produce ``values`` (round-robin over partitions) and wait until all are acknowledged.

    Raises: RuntimeError when some were not delivered."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for value in values:
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.1)
    left = producer.flush(30)
    if left:
        raise RuntimeError(f"{left} events to {topic} were not delivered within 30 s")


@contextmanager
def local_stack(state_dir: Path) -> Iterator[Settings]:
    """Kafka and the registered services on free ports for the duration of the block,
    stopped by pid afterwards (also on failure or Ctrl-C)."""
    stack = DevStack(state_dir, Settings())
    services = [dataclasses.replace(spec, health_port=0) for spec in SERVICES]
    names = ", ".join(spec.name for spec in services)
    try:
        with console.status(f"starting Kafka (KRaft, 127.0.0.1) and {names} ..."):
            record = stack.up(
                dev=DevSettings(kafka_port=0, kafka_controller_port=0),
                with_s3=False,
                services=services,
            )
        console.print(f"[green]stack up[/] kafka at {record.bootstrap_servers}; services: {names}")
        yield Settings(
            kafka=KafkaSettings(bootstrap_servers=record.bootstrap_servers), state_dir=state_dir
        )
    finally:
        stopped = stack.down()
        console.print(f"[green]stack down[/] stopped: {', '.join(stopped) or 'nothing'}")


def create_table(root: Path) -> Table:
    table = Table.create(
        str(root),
        name="orders",
        record_key="order_id",
        partition_by=["region"],
        ordering_field="updated_at",
        buckets=2,
        schema=ORDERS_SCHEMA,
        # No reader runs across the demo's clean: it may delete superseded files at once.
        clean_policy=CleanPolicy(retention_window_s=0),
        publish_delta=True,
    )
    console.print(
        f"table [bold]orders[/] at {root} (record key order_id, partitioned by region, 2 buckets, "
        "published as a Delta Lake table)"
    )
    return table


def stream_orders(bootstrap: str, waves: list[list[bytes]]) -> threading.Thread:
    """Produce ``waves`` of events, ``WAVE_PAUSE_S`` apart, from a thread."""

    def run() -> None:
        for wave in waves:
            time.sleep(WAVE_PAUSE_S)
            produce(bootstrap, TOPIC, wave)

    thread = threading.Thread(target=run, name="demo-producer", daemon=True)
    thread.start()
    return thread


@dataclass
class Demo:
    """What the steps share: the work folder, the stack's settings, the table, and what the
    ingestion did (the checks at the end compare it with what was produced)."""

    work: Path
    settings: Settings
    table: Table
    events: list[bytes]
    log_file: Path
    spec: IngestSpec | None = None
    rows_read: int = 0
    errors_listed: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def good(self) -> int:
        return len(self.events) - len(MALFORMED)


Step = tuple[str, Callable[[Demo], None]]


def quiet_logs(work: Path, log_file: Path) -> None:
    """Spark's log4j and lakewarden's Python logs go to ``log_file``, not the terminal: a
    ``log4j2.properties`` in a ``SPARK_CONF_DIR`` of the demo's own (read when the JVM starts)
    and a file handler on the root logger."""
    conf = work / "spark-conf"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "log4j2.properties").write_text(
        "rootLogger.level = info\n"
        "rootLogger.appenderRef.file.ref = file\n"
        "appender.file.type = File\n"
        "appender.file.name = file\n"
        f"appender.file.fileName = {log_file}\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = %d{HH:mm:ss.SSS} %p %c: %m%n\n"
    )
    os.environ["SPARK_CONF_DIR"] = str(conf)
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def step_ingest(demo: Demo) -> None:
    """The first wave of events, the ingestion query, the other waves while it runs; until
    every event was read. Bad records go to the error table."""
    from lakewarden.cli.ingest import run_with_progress, summary
    from lakewarden.spark.ingest import IngestJob, IngestSpec, default_checkpoint, ingest_session

    settings, table = demo.settings, demo.table
    bootstrap = settings.kafka.bootstrap_servers
    assert bootstrap is not None
    create_topic(bootstrap, TOPIC)
    waves = [
        demo.events[i : i + EVENTS_PER_WAVE] for i in range(0, len(demo.events), EVENTS_PER_WAVE)
    ]
    console.print(
        f"producing {len(demo.events)} order events to topic {TOPIC} in {len(waves)} waves "
        f"{WAVE_PAUSE_S} s apart ({len(MALFORMED)} malformed)"
    )
    spec = IngestSpec(
        topic=TOPIC,
        table=table.uri,
        bootstrap=bootstrap,
        checkpoint=default_checkpoint(settings, table.config, TOPIC),
        trigger_s=2.0,
        max_records_per_batch=200,
        bad_records="error-table",
        settings=settings,
    )
    with console.status("starting Spark (local[2]) with the Kafka source ..."):
        spark = ingest_session(master="local[2]", app_name="lakewarden-demo", local_dir=demo.work)
    try:
        produce(bootstrap, TOPIC, waves[0])
        job = IngestJob.start(spark, spec)
        producer = stream_orders(bootstrap, waves[1:])
        totals = run_with_progress(
            job, console, stop_when=lambda t: t.input_rows >= len(demo.events), timeout_s=150
        )
        console.print(summary(totals, spec.bad_records_dir, spec.bad_records))
        count = spark.read.format("lakewarden").load(spec.table).count()
        console.print(f"Spark reads {count} rows back through format lakewarden")
    finally:
        spark.stop()
    producer.join(30)
    demo.spec = spec


def step_timeline(demo: Demo) -> None:
    import lakewarden

    shown = RichTable(title="timeline of orders")
    for column in ("instant", "action", "state", "operation", "micro-batch", "rows", "bad"):
        shown.add_column(column)
    for state in demo.table.timeline():
        commit = state.commit
        batch = commit.batch if commit is not None else None
        shown.add_row(
            state.instant,
            str(state.action),
            str(state.state),
            state.operation or "",
            str(batch.batch_id) if batch is not None else "",
            str((commit.input_records or 0) - commit.failed_records) if commit is not None else "",
            str(commit.failed_records) if commit is not None else "",
        )
    console.print(shown)
    demo.rows_read = lakewarden.read(demo.table.uri).num_rows
    console.print(f"read back {demo.rows_read} rows ({demo.good} good events produced)")


def step_services(demo: Demo) -> None:
    from lakewarden._demo_show import show_services

    show_services(console, demo.settings, demo.table)


def step_errors(demo: Demo) -> None:
    from lakewarden._demo_show import show_errors

    demo.errors_listed = show_errors(console, demo.settings, demo.table, len(MALFORMED))


def step_killed_writer(demo: Demo) -> None:
    from lakewarden._demo_show import kill_a_writer

    kill_a_writer(console, demo.settings, demo.table, demo.log_file)


def step_clean(demo: Demo) -> None:
    """Clean the table keeping only its latest commit (through timeline-lock's lease) and say
    what the clean deleted, and which failed writes (the killed writer's) it rolled back."""
    result = Table.open(demo.table.uri, settings=demo.settings).clean("keep-latest-commits=1")
    console.print(
        f"cleaner: {result.files_deleted} superseded files ({result.bytes_deleted} bytes) "
        f"deleted under {result.policy.describe()}"
        + (f" as clean {result.instant}" if result.instant else "")
        + (f", {len(result.rolled_back)} failed writes rolled back" if result.rolled_back else "")
    )


def step_explain(demo: Demo) -> None:
    """``lakewarden explain`` of the instant most worth explaining (the killed writer's, a
    rolled-back or aborted one, else a batch with bad records), from the events alone."""
    from lakewarden._demo_show import table_history
    from lakewarden.history import explain, telling_instant

    history = table_history(demo.settings, demo.table)
    instant = telling_instant(history)
    if instant is None:
        console.print("[red]explain: no event names an instant of the table")
        demo.failures.append("explain: no event names an instant of the table")
        return
    console.print(
        f"$ lakewarden explain {demo.table.uri} {instant}", highlight=False, soft_wrap=True
    )
    for line in explain(history, instant):
        console.print(line, highlight=False, markup=False, soft_wrap=True)


def step_delta(demo: Demo) -> None:
    """Read the table through Delta Lake (the ``deltalake`` package, delta-rs: no lakewarden
    code) after ``lakewarden publish sync``, and compare it with lakewarden's own read."""
    import deltalake

    from lakewarden.publish import DeltaPublisher

    table = Table.open(demo.table.uri, settings=demo.settings)
    publisher = DeltaPublisher(table.storage, table.config, table.timeline_log)
    before = publisher.status()
    console.print(
        f"published by the commits and the publisher service: version "
        f"{before.published_version} of {before.target_version} (lag {before.lag})"
    )
    synced = publisher.sync()
    console.print(
        f"$ lakewarden publish sync {table.uri}: published version "
        f"{synced.status.published_version}, lag {synced.status.lag}",
        highlight=False,
        soft_wrap=True,
    )
    delta = deltalake.DeltaTable(table.uri)
    columns = table.schema.names
    # delta-rs's own query engine, not to_pyarrow_table(): a pyarrow dataset over delta-rs's
    # filesystem can abort the interpreter at exit (delta-io/delta-rs#2184), after the demo.
    query = deltalake.QueryBuilder().register("demo", delta).execute("SELECT * FROM demo")
    via_delta = pa.table(query).select(columns)
    own = table.read().select(columns)
    same = sorted(map(str, via_delta.to_pylist())) == sorted(map(str, own.to_pylist()))
    console.print(
        f"deltalake.DeltaTable(uri) at version {delta.version()}: {via_delta.num_rows} rows, "
        + ("[green]the same rows as lakewarden.read[/]" if same else "[red]rows differ[/]")
    )
    if not same:
        raise SystemExit("demo failed: deltalake read other rows than lakewarden.read")


STEPS: list[Step] = [
    ("ingest a Kafka topic with Spark", step_ingest),
    ("the timeline", step_timeline),
    ("what the services did", step_services),
    ("the bad records, in the error table", step_errors),
    ("a writer killed mid-batch", step_killed_writer),
    ("the cleaner's work", step_clean),
    ("why: lakewarden explain of one instant", step_explain),
    ("any engine reads it: the Delta Lake log", step_delta),
]


def check(demo: Demo) -> None:
    """Raises: SystemExit when the table or the error table does not hold what it should."""
    if demo.rows_read != demo.good or demo.errors_listed != len(MALFORMED):
        raise SystemExit(
            f"demo failed: {demo.rows_read} rows in the table (expected {demo.good}), "
            f"{demo.errors_listed} records in the error table (expected {len(MALFORMED)})"
        )


def run(work: Path, log_file: Path, steps: Sequence[Step] = STEPS) -> None:
    """Stack up, the table, ``steps`` in order, stack down. Raises: SystemExit."""
    quiet_logs(work, log_file)
    events = order_events(WAVES * EVENTS_PER_WAVE)
    with local_stack(work / "state") as stack_settings:
        settings = stack_settings.model_copy(
            update={"error_table": ErrorTableSettings(enabled=True)}
        )
        table = create_table(work / "tables" / "orders")
        demo = Demo(work=work, settings=settings, table=table, events=events, log_file=log_file)
        try:
            for number, (title, step) in enumerate(steps, start=1):
                console.rule(f"[bold]{number}. {title}")
                step(demo)
        finally:
            # The steps' Kafka clients (lock, heartbeats) close before the broker stops, or
            # they would log connection failures until the process exits.
            close_shared_connections()
    check(demo)


@contextmanager
def stderr_to(log_file: Path) -> Iterator[None]:
    """File descriptor 2 into ``log_file`` for the block: what the JVM, librdkafka and the
    Python workers write there (they inherit it) never reaches the terminal. Restored before
    an error propagates, so a failure still shows."""
    sys.stderr.flush()
    saved = os.dup(2)
    with log_file.open("ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="lakewarden-demo-"))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    log_file = Path(tempfile.gettempdir()) / f"lakewarden-demo-{stamp}.log"
    started = time.monotonic()
    try:
        with stderr_to(log_file):
            run(work, log_file)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        console.print(f"Spark's, the services' clients' and lakewarden's logs: {log_file}")
    console.print(f"[bold green]demo finished[/] in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
