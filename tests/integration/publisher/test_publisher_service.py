"""The publisher service on the real broker: a table registered on ``clean.requests`` gets its
Delta log caught up, each ``completed`` announced on ``timeline`` is published soon after (the
sweep is set far off, so only the event can have done it), a table without publishing is left
alone, and a bad event goes to the DLQ while the service keeps serving."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import deltalake
import pyarrow as pa
import pytest
from confluent_kafka import Consumer

from lakewarden.clients import request_clean
from lakewarden.clients.timeline_events import TimelinePublisher
from lakewarden.events import EventProducer, decode, ensure_topics
from lakewarden.events.topics import DLQ, TIMELINE
from lakewarden.settings import Settings
from lakewarden.table import EmbeddedCoordinator, Table, Transition
from lakewarden.testing import wait_until
from lakewarden_services._common.process import ServiceProcess

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


@pytest.fixture(scope="module")
def pub_settings(kafka_settings: Settings) -> Settings:
    kafka = kafka_settings.kafka.model_copy(update={"topic_prefix": f"pb{uuid.uuid4().hex[:8]}."})
    settings = kafka_settings.model_copy(update={"kafka": kafka})
    ensure_topics(settings)
    return settings


@pytest.fixture(scope="module")
def publisher(
    pub_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    home = tmp_path_factory.mktemp("publisher")
    process = ServiceProcess(
        "lakewarden_services.publisher",
        pub_settings,
        home=home,
        extra_env={"LAKEWARDEN_PUBLISHER_SWEEP_INTERVAL_S": "600"},
    )
    process.start()
    yield process
    process.stop()


def make_table(root: Path, *, publish: bool) -> Table:
    table = Table.create(
        str(root),
        name=root.name,
        record_key="id",
        schema=SCHEMA,
        publish_delta=publish,
        coordinator=EmbeddedCoordinator(),
    )
    table.timeline_log.after_completed = None  # only the service publishes
    return table


def write(table: Table, v: int) -> None:
    table.write(pa.Table.from_pylist([{"id": v, "v": str(v)}], schema=SCHEMA))


def delta_version(root: Path) -> int:
    return len(list((root / "_delta_log").glob("*.json"))) - 1


def test_registration_catches_up_and_each_completed_event_publishes(
    pub_settings: Settings, publisher: ServiceProcess, tmp_path: Path
) -> None:
    root = tmp_path / "on"
    table = make_table(root, publish=True)
    for v in range(3):
        write(table, v)
    assert delta_version(root) == 0
    request_clean(pub_settings, table_id=table.table_id, table_uri=str(root))
    wait_until(lambda: delta_version(root) == 3, 60, "the registered table to catch up")

    announcer = TimelinePublisher(pub_settings)
    try:
        for v in range(3, 6):
            write(table, v)
            entry = next(
                e
                for e in reversed(list(table.timeline_log.entries()))
                if e.transition is Transition.COMPLETED
            )
            sent = time.monotonic()
            announcer.publish(table.table_id, entry)
            wait_until(lambda v=v: delta_version(root) == v + 1, 30, f"version {v + 1}")
            assert time.monotonic() - sent < 20  # the event, not the 600 s sweep
    finally:
        announcer.close()
    delta = deltalake.DeltaTable(str(root))
    assert sorted(delta.to_pyarrow_table().column("id").to_pylist()) == list(range(6))


def test_a_table_without_publishing_is_left_alone_and_bad_events_are_dead_lettered(
    pub_settings: Settings, publisher: ServiceProcess, tmp_path: Path
) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": pub_settings.kafka.bootstrap_servers,
            "group.id": f"dlq-reader-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([DLQ.name(pub_settings)])
    producer = EventProducer(pub_settings, producer_id="test")
    producer.produce_bytes(TIMELINE.name(pub_settings), b"\xc3\x01 not an event", key=b"t1")
    producer.flush()
    off = make_table(tmp_path / "off", publish=False)
    write(off, 1)
    request_clean(pub_settings, table_id=off.table_id, table_uri=str(tmp_path / "off"))
    # The service keeps serving: a publishing table registered after the bad event catches up.
    on = make_table(tmp_path / "on", publish=True)
    write(on, 1)
    request_clean(pub_settings, table_id=on.table_id, table_uri=str(tmp_path / "on"))
    wait_until(lambda: delta_version(tmp_path / "on") == 1, 60, "the second table to catch up")
    reasons: list[str] = []

    def dead_letters() -> list[str]:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            record = decode(message.value()).record
            if "publisher" in (record["consumer_group"] or ""):
                reasons.append(record["reason"])
        return reasons

    try:
        wait_until(lambda: dead_letters(), 30, "the publisher's dead letter")
    finally:
        consumer.close()
    assert reasons == ["unknown_fingerprint"]
    assert not (tmp_path / "off" / "_delta_log").exists()
