"""``make demo``: the main job, end to end, on the local stack.

For now (platform stage) it:

1. brings the local stack up in its own state folder on free ports, so it never collides with a
   stack a developer already runs;
2. creates a small lakewarden table on the local filesystem and commits two writes to it
   (an insert, then an upsert) with the embedded coordinator;
3. publishes one sample of every event through Kafka, plus one malformed message;
4. reads them back, prints them, and shows the malformed one landing in the dead-letter topic;
5. brings the stack down, whatever happened.

Later issues grow it into the streaming ingestion demo.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
from rich.console import Console
from rich.table import Table as RichTable

from lakewarden.devstack import DevSettings, DevStack
from lakewarden.events import DLQ, TOPICS, EventConsumer, EventProducer, sample_events
from lakewarden.events.topics import HEARTBEATS
from lakewarden.settings import KafkaSettings, Settings

console = Console()
DEMO_TABLE_ID = "demo-orders"
POISON = b"not an avro event"


@contextmanager
def local_stack(state_dir: Path) -> Iterator[Settings]:
    """Kafka on free ports for the duration of the block, stopped by pid afterwards."""
    stack = DevStack(state_dir, Settings())
    with console.status("starting Kafka (KRaft, 127.0.0.1) ..."):
        record = stack.up(
            dev=DevSettings(kafka_port=0, kafka_controller_port=0), with_s3=False, services=[]
        )
    console.print(f"[green]stack up[/] kafka at {record.bootstrap_servers}")
    try:
        yield Settings(
            kafka=KafkaSettings(bootstrap_servers=record.bootstrap_servers), state_dir=state_dir
        )
    finally:
        stopped = stack.down()
        console.print(f"[green]stack down[/] stopped: {', '.join(stopped) or 'nothing'}")


def table_round(root: Path) -> None:
    """Two commits to a copy-on-write table, then read it back."""
    import lakewarden

    schema = pa.schema(
        [
            ("order_id", pa.string()),
            ("region", pa.string()),
            ("amount", pa.float64()),
            ("updated_at", pa.int64()),
        ]
    )
    table = lakewarden.Table.create(
        str(root),
        name="orders",
        record_key="order_id",
        partition_by=["region"],
        ordering_field="updated_at",
        buckets=2,
        schema=schema,
    )
    first = pa.table(
        {
            "order_id": ["o1", "o2", "o3"],
            "region": ["eu", "us", "eu"],
            "amount": [10.0, 20.0, 30.0],
            "updated_at": [1, 1, 1],
        },
        schema=schema,
    )
    second = pa.table(
        {
            "order_id": ["o2", "o4"],
            "region": ["us", "us"],
            "amount": [25.0, 40.0],
            "updated_at": [2, 2],
        },
        schema=schema,
    )
    table.write(first, operation="insert")
    table.write(second, operation="upsert")
    timeline = RichTable(title=f"timeline of {root.name}")
    for column in ("instant", "action", "state", "operation"):
        timeline.add_column(column)
    for state in table.timeline():
        timeline.add_row(state.instant, str(state.action), str(state.state), state.operation or "")
    console.print(timeline)
    rows = lakewarden.read(str(root)).sort_by("order_id").to_pylist()
    console.print(
        f"read back {len(rows)} rows: " + ", ".join(f"{r['order_id']}={r['amount']}" for r in rows)
    )


def event_round(settings: Settings) -> None:
    """Every event type through Kafka and back, plus one poison message into the DLQ."""
    samples = sample_events(table_id=DEMO_TABLE_ID)
    with EventProducer(settings, producer_id="demo") as producer:
        for name, record in samples.items():
            producer.send(name, record)
        poison_topic = HEARTBEATS.name(settings)
        producer.produce_bytes(poison_topic, POISON, key=DEMO_TABLE_ID.encode())
        producer.flush(10)
    topics = sorted(spec.name(settings) for spec in TOPICS if spec is not DLQ)
    # The DeadLetter sample itself travels on the DLQ topic, with the poison message.
    on_dlq = {name for name in samples if name in DLQ.events}
    received = _consume(settings, topics, expected=len(samples) - len(on_dlq))
    shown = RichTable(title="events read back from Kafka")
    for column in ("event", "topic", "offset", "fields"):
        shown.add_column(column)
    for event in received:
        fields = {k: v for k, v in event.record.items() if k != "envelope"}
        shown.add_row(event.name, event.topic, str(event.offset), _short(fields))
    console.print(shown)
    dead = _consume(settings, [DLQ.name(settings)], expected=len(on_dlq) + 1)
    for letter in dead:
        origin = "sample DeadLetter event" if letter.record["value"] != POISON else "poison"
        console.print(
            f"[yellow]dead letter[/] ({origin}) from {letter.record['topic']} "
            f"offset {letter.record['offset']}: {letter.record['reason']}"
        )
    missing = set(samples) - on_dlq - {e.name for e in received}
    poisoned = [d for d in dead if d.record["topic"] == poison_topic]
    if missing or not poisoned:
        raise SystemExit(
            f"demo failed: missing events {sorted(missing)}, "
            f"poison message dead-lettered: {bool(poisoned)}"
        )


def _consume(settings: Settings, topics: list[str], *, expected: int) -> list[Any]:
    events = []
    with EventConsumer(settings, group_id=f"demo-{len(topics)}", topics=topics) as consumer:
        for event in consumer.events(idle_timeout_s=5.0, poll_timeout_s=0.5):
            events.append(event)
            if len(events) >= expected:
                break
    return events


def _short(fields: dict[str, Any]) -> str:
    text = json.dumps(fields, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="lakewarden-demo-"))
    try:
        table_round(work / "orders")
        with local_stack(work / "state") as settings:
            event_round(settings)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    console.print("[bold green]demo finished[/]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
