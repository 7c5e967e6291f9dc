"""``make demo``: streaming ingestion from Kafka into a lakewarden table, end to end.

1. brings the local stack up in its own temporary state folder, on free ports: Kafka and every
   registered service (timeline-lock, heartbeat-monitor), so it never collides with a stack a
   developer already runs;
2. creates an ``orders`` table (partitioned by region, 2 buckets) on the local filesystem;
3. produces a stream of sample order events as JSON to a topic, in waves, a few of them
   malformed (not JSON, a missing order id, an amount that is not a number);
4. runs the ingestion (``lakewarden.spark.ingest``: Spark Structured Streaming, Kafka source,
   ``writeStream.format("lakewarden")``, bad records skipped into
   ``<checkpoint>/_bad_records``) with a line per micro-batch until every event is in;
   every commit takes timeline-lock's lease and beats to heartbeat-monitor;
5. prints the timeline, the row count read back and where the bad records went, and cleans
   the table keeping only the latest commit (one line: what the clean deleted);
6. brings the stack down, whatever happened, and deletes the temporary folder.

Runs on the embedded defaults with no configuration. The order events and the topic helpers
are here for tests and benchmarks too.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from rich.console import Console
from rich.table import Table as RichTable

from lakewarden.devstack import SERVICES, DevSettings, DevStack
from lakewarden.settings import KafkaSettings, Settings
from lakewarden.table.table import Table

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
    )
    console.print(
        f"table [bold]orders[/] at {root} (record key order_id, partitioned by region, 2 buckets)"
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


def ingest(
    settings: Settings, table: Table, work: Path, waves: list[list[bytes]]
) -> tuple[IngestSpec, threading.Thread]:
    """Steps 3-4: the first wave of events, the ingestion query, the other waves while it
    runs; until every event was read."""
    from lakewarden.cli.ingest import run_with_progress, summary
    from lakewarden.spark.ingest import IngestJob, IngestSpec, default_checkpoint, ingest_session

    assert settings.kafka.bootstrap_servers is not None
    spec = IngestSpec(
        topic=TOPIC,
        table=table.uri,
        bootstrap=settings.kafka.bootstrap_servers,
        checkpoint=default_checkpoint(settings, table.config, TOPIC),
        trigger_s=2.0,
        max_records_per_batch=200,
        bad_records="skip",
        settings=settings,
    )
    with console.status("starting Spark (local[2]) with the Kafka source ..."):
        spark = ingest_session(master="local[2]", app_name="lakewarden-demo", local_dir=work)
    expected = sum(len(wave) for wave in waves)
    try:
        produce(settings.kafka.bootstrap_servers, TOPIC, waves[0])
        job = IngestJob.start(spark, spec)
        producer = stream_orders(settings.kafka.bootstrap_servers, waves[1:])
        totals = run_with_progress(
            job, console, stop_when=lambda t: t.input_rows >= expected, timeout_s=150
        )
        console.print(summary(totals, spec.bad_records_dir))
        count = spark.read.format("lakewarden").load(spec.table).count()
        console.print(f"Spark reads {count} rows back through format lakewarden")
    finally:
        spark.stop()
    return spec, producer


def show_timeline(table: Table) -> None:
    from lakewarden.spark.ingest import BATCH_ID

    shown = RichTable(title="timeline of orders")
    for column in ("instant", "action", "state", "operation", "micro-batch", "rows"):
        shown.add_column(column)
    for state in table.timeline():
        meta = state.commit.extra_metadata if state.commit is not None else {}
        shown.add_row(
            state.instant,
            str(state.action),
            str(state.state),
            state.operation or "",
            meta.get(BATCH_ID, ""),
            meta.get("num_input_records", ""),
        )
    console.print(shown)


def show_bad_records(directory: Path) -> list[dict[str, Any]]:
    from lakewarden.spark.ingest import bad_record_files, read_bad_records

    records = read_bad_records(directory)
    files = bad_record_files(directory)
    console.print(
        f"[yellow]{len(records)} bad records[/] were left out of the table and written to "
        f"{directory} ({len(files)} files, one JSON line each, with topic, partition, offset "
        "and reason):"
    )
    for record in sorted(records, key=lambda r: (r["partition"], r["offset"])):
        value = str(record["value"])
        value = value if len(value) <= 50 else value[:47] + "..."
        console.print(
            f"  bad record partition {record['partition']} offset {record['offset']} "
            f"(batch {record['batch_id']}): {record['reason']}: {value}"
        )
    return records


def show_clean(uri: str, settings: Settings) -> None:
    """Clean the table keeping only its latest commit (through timeline-lock's lease) and say
    what the clean deleted."""
    result = Table.open(uri, settings=settings).clean("keep-latest-commits=1")
    console.print(
        f"cleaner: {result.files_deleted} superseded files ({result.bytes_deleted} bytes) "
        f"deleted under {result.policy.describe()}"
        + (f" as clean {result.instant}" if result.instant else "")
        + (f", {len(result.rolled_back)} failed writes rolled back" if result.rolled_back else "")
    )


def run(work: Path) -> None:
    """Steps 1-6. Raises: SystemExit when the table does not hold what it should."""
    import lakewarden

    events = order_events(WAVES * EVENTS_PER_WAVE)
    good = len(events) - len(MALFORMED)
    with local_stack(work / "state") as settings:
        assert settings.kafka.bootstrap_servers is not None
        table = create_table(work / "tables" / "orders")
        create_topic(settings.kafka.bootstrap_servers, TOPIC)
        console.print(
            f"producing {len(events)} order events to topic {TOPIC} in {WAVES} waves "
            f"{WAVE_PAUSE_S} s apart ({len(MALFORMED)} malformed)"
        )
        waves = [events[i : i + EVENTS_PER_WAVE] for i in range(0, len(events), EVENTS_PER_WAVE)]
        spec, producer = ingest(settings, table, work / "spark", waves)
        producer.join(30)
        show_timeline(table)
        rows = lakewarden.read(spec.table).num_rows
        console.print(f"read back {rows} rows ({good} good events produced)")
        bad = show_bad_records(spec.bad_records_dir)
        show_clean(spec.table, settings)
    if rows != good or len(bad) != len(MALFORMED):
        raise SystemExit(
            f"demo failed: {rows} rows in the table (expected {good}), "
            f"{len(bad)} bad records (expected {len(MALFORMED)})"
        )


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="lakewarden-demo-"))
    started = time.monotonic()
    try:
        run(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    console.print(f"[bold green]demo finished[/] in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
