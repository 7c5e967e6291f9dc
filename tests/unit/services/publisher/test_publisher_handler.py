"""The publisher's event handling, queue, sweep and worker, driven without Kafka:
dead letters for bad events, registration, completed transitions only, and a worker that
publishes a table's Delta log (and skips a table that does not publish)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import deltalake
import pyarrow as pa

from lakewarden.events import Event, EventDecodeError, Undecodable, decode, encode, make_event
from lakewarden.settings import Settings
from lakewarden.table import Table
from lakewarden_services._common.dlq import DeadLetters
from lakewarden_services._common.loop_service import Consumed
from lakewarden_services.publisher.handler import EventHandler, PublishQueue, Work
from lakewarden_services.publisher.worker import PublishWorker

TABLE = "6f1c9a53-8a4b-4c3e-9f7e-0d2b8f3e1a11"
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


class FakeTopic:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes | None, Event]] = []

    async def send(self, *, key: bytes | None, value: Event) -> None:
        self.sent.append((key, value))


class Harness:
    def __init__(self) -> None:
        self.dlq = FakeTopic()
        self.registry: dict[str, Any] = {}
        self.queue = PublishQueue()
        self.wakes = 0
        letters = DeadLetters(self.dlq, service="publisher", consumer_group="g")
        self.handler = EventHandler(
            registry=self.registry,
            queue=self.queue,
            dead_letters=letters,
            wake=self._wake,
            clock=lambda: 5.0,
        )

    def _wake(self) -> None:
        self.wakes += 1

    def feed(self, value: bytes, *, key: bytes | None = TABLE.encode(), partition: int = 3) -> None:
        message = Consumed("t", partition, 0, key, value, 0.0)
        try:
            decoded: Any = decode(value)
        except EventDecodeError as err:
            decoded = Undecodable(err, value)
        asyncio.run(self.handler.handle(message, decoded, source="test"))

    def reasons(self) -> list[str]:
        return [event.record["reason"] for _, event in self.dlq.sent]


def registration(uri: str = "/data/t") -> bytes:
    values = {"table_uri": uri, "policy": None, "delete_orphans": False, "requested_by": "me"}
    return encode(
        "CleanRequest", make_event("CleanRequest", table_id=TABLE, producer_id="p", **values)
    )


def transition(kind: str, action: str = "commit") -> bytes:
    record = make_event(
        "TimelineTransition",
        table_id=TABLE,
        producer_id="p",
        seq=3,
        instant="20250314092653589",
        action=action,
        transition=kind,
        actor="w",
        lock_token=1,
        wall_time=0,
        payload="{}",
    )
    return encode("TimelineTransition", record)


def test_a_registration_records_the_uri_and_queues_the_table() -> None:
    h = Harness()
    h.feed(registration(), partition=7)
    assert h.registry[TABLE] == {"uri": "/data/t", "partition": 7}
    work = h.queue.take()
    assert work is not None and work.table_uri == "/data/t" and h.wakes == 1
    assert h.handler.owned({7}) == [TABLE] and h.handler.owned({1}) == []


def test_only_completed_transitions_queue_and_they_merge() -> None:
    h = Harness()
    h.registry[TABLE] = {"uri": "/data/t", "partition": 3}
    for kind in ("requested", "inflight", "rolled_back", "aborted", "cancel_requested"):
        h.feed(transition(kind))
    assert len(h.queue) == 0 and h.dlq.sent == []
    h.feed(transition("completed"))
    h.feed(transition("completed", action="clean"))
    assert len(h.queue) == 1
    assert h.queue.take() is not None and h.queue.take() is None  # never handed out twice
    h.handler.sweep({3})
    assert h.queue.take() is None  # still running
    h.queue.done(TABLE)
    assert h.queue.take() is not None


def test_an_unknown_table_is_left_to_its_owner() -> None:
    h = Harness()
    h.feed(transition("completed"))
    assert len(h.queue) == 0 and h.dlq.sent == []


def test_bad_events_are_dead_lettered_and_the_handler_goes_on() -> None:
    h = Harness()
    h.feed(b"\x00garbage")
    h.feed(registration(), key=b"another-table")
    h.feed(registration(uri=""))
    expired = make_event(
        "HeartbeatExpired",
        table_id=TABLE,
        producer_id="hm",
        instant="20250314092653589",
        owner="w",
        last_seen_ms=0,
        detected_ms=0,
    )
    h.feed(encode("HeartbeatExpired", expired))
    assert h.reasons()[1:] == ["key_mismatch", "invalid_request", "unexpected_event"]
    assert len(h.reasons()) == 4
    h.feed(registration())
    assert len(h.queue) == 1


def test_the_worker_publishes_a_table_and_skips_one_that_does_not_publish(
    tmp_path: Path,
) -> None:
    published = Table.create(
        str(tmp_path / "on"), name="on", record_key="id", schema=SCHEMA, publish_delta=True
    )
    published.timeline_log.after_completed = None  # only the service publishes
    published.write(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=SCHEMA), "insert")
    plain = Table.create(str(tmp_path / "off"), name="off", record_key="id", schema=SCHEMA)
    plain.write(pa.table({"id": [1], "v": ["a"]}, schema=SCHEMA), "insert")
    worker = PublishWorker(Settings())
    result = worker.sync(Work(published.table_id, str(tmp_path / "on"), 0.0))
    assert result is not None and result.written == (1,) and result.status.lag == 0
    delta = deltalake.DeltaTable(str(tmp_path / "on"))
    assert sorted(delta.to_pyarrow_table().column("id").to_pylist()) == [1, 2]
    assert worker.sync(Work(plain.table_id, str(tmp_path / "off"), 0.0)) is None
    assert not (tmp_path / "off" / "_delta_log").exists()
