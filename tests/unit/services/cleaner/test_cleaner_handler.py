"""The cleaner's event handling, queue, sweep and worker, driven without Kafka:
dead letters for every kind of bad event, registration, merging triggers, ownership."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner

from lakewarden.cli import cli
from lakewarden.events import (
    Event,
    EventDecodeError,
    InvalidEvent,
    Undecodable,
    decode,
    encode,
    make_event,
)
from lakewarden.settings import Settings
from lakewarden.table import CleanPolicy, EmbeddedCoordinator, Table, Transition
from lakewarden_services._common.dlq import DeadLetters
from lakewarden_services._common.loop_service import Consumed
from lakewarden_services.cleaner.handler import EventHandler
from lakewarden_services.cleaner.protocol import Trigger, parse_event
from lakewarden_services.cleaner.queue import CleanQueue
from lakewarden_services.cleaner.worker import CleanWorker

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
        self.queue = CleanQueue()
        self.wakes = 0
        letters = DeadLetters(self.dlq, service="cleaner", consumer_group="g")
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


def request(uri: str = "/data/t", **fields: Any) -> bytes:
    values = {"table_uri": uri, "policy": None, "delete_orphans": False, "requested_by": "me"}
    values.update(fields)
    return encode(
        "CleanRequest", make_event("CleanRequest", table_id=TABLE, producer_id="p", **values)
    )


def transition(action: str, kind: str) -> bytes:
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


def expired(instant: str) -> bytes:
    record = make_event(
        "HeartbeatExpired",
        table_id=TABLE,
        producer_id="hm",
        instant=instant,
        owner="w",
        last_seen_ms=0,
        detected_ms=0,
    )
    return encode("HeartbeatExpired", record)


def test_a_request_registers_the_table_and_queues_it() -> None:
    h = Harness()
    h.feed(request(policy="keep-latest-commits=2", delete_orphans=True), partition=7)
    assert h.registry[TABLE] == {"uri": "/data/t", "partition": 7}
    work = h.queue.take()
    assert work is not None and work.table_uri == "/data/t" and h.wakes == 1
    assert work.policy == "keep-latest-commits=2" and work.delete_orphans
    assert h.handler.owned({7}) == [TABLE] and h.handler.owned({1, 2}) == []


def test_triggers_of_a_queued_table_merge() -> None:
    h = Harness()
    h.feed(request())
    h.feed(transition("commit", "completed"))
    h.feed(expired("20250314092653589"))
    h.feed(expired("20250314092653590"))
    assert len(h.queue) == 1
    work = h.queue.take()
    assert work is not None and work.dead == {"20250314092653589", "20250314092653590"}
    assert h.queue.take() is None  # running: never handed out twice
    h.handler.sweep({3})
    assert h.queue.take() is None  # still running
    h.queue.done(TABLE)
    assert h.queue.take() is not None


def test_transitions_that_leave_no_garbage_are_ignored() -> None:
    h = Harness()
    h.registry[TABLE] = {"uri": "/data/t", "partition": 3}
    for action, kind in [("commit", "requested"), ("commit", "inflight"), ("clean", "completed")]:
        h.feed(transition(action, kind))
    assert len(h.queue) == 0 and h.dlq.sent == []
    h.feed(transition("commit", "rolled_back"))
    assert len(h.queue) == 1


def test_an_unknown_table_is_left_to_its_owner() -> None:
    h = Harness()
    h.feed(transition("commit", "completed"))
    assert len(h.queue) == 0 and h.dlq.sent == []


@pytest.mark.parametrize(
    ("value", "key", "reason"),
    [
        (b"\x00not-avro-at-all", TABLE.encode(), "bad_magic"),
        (request(), b"other-table", "key_mismatch"),
        (request(uri=""), TABLE.encode(), "invalid_request"),
        (request(policy="keep-nothing=1"), TABLE.encode(), "invalid_request"),
    ],
    # Fixed ids: the encoded requests carry fresh event ids, and pytest-xdist needs every
    # worker to collect the same test names.
    ids=["not-avro", "other-tables-key", "empty-uri", "unknown-policy"],
)
def test_bad_events_are_dead_lettered(value: bytes, key: bytes, reason: str) -> None:
    h = Harness()
    h.feed(value, key=key)
    assert h.reasons() == [reason] and len(h.queue) == 0 and h.registry == {}


def test_the_wrong_event_is_dead_lettered() -> None:
    record = make_event(
        "CancelResult",
        table_id=TABLE,
        producer_id="p",
        request_id="r",
        instant="20250314092653589",
        outcome="aborted",
        reason=None,
    )
    h = Harness()
    h.feed(encode("CancelResult", record))
    assert h.reasons() == ["unexpected_event"]
    with pytest.raises(InvalidEvent):
        parse_event("CancelResult", record, key=TABLE.encode())


def test_worker_cleans_with_the_requested_policy(tmp_path: Path) -> None:
    coordinator = EmbeddedCoordinator()
    table = Table.create(
        str(tmp_path / "t"),
        name="t",
        record_key="id",
        schema=SCHEMA,
        coordinator=coordinator,
        clean_policy=CleanPolicy(retention_window_s=0),  # superseded files go at once
    )
    for version in range(3):
        table.write(pa.Table.from_pylist([{"id": 1, "v": str(version)}], schema=SCHEMA))
    queue = CleanQueue()
    queue.add(Trigger(table.table_id, "test", policy="keep-latest-commits=1"), table.uri, 0.0)
    work = queue.take()
    assert work is not None
    result = CleanWorker(Settings(), lambda: coordinator).clean(work)
    assert result.files_deleted == 2 and result.instant is not None
    clean = table.state().get(result.instant)
    assert clean is not None and clean.state is Transition.COMPLETED


def test_cli_clean_dry_run_and_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("LAKEWARDEN_KAFKA")]:
        monkeypatch.delenv(key)
    uri = str(tmp_path / "t")
    no_window = CleanPolicy(retention_window_s=0)  # superseded files go at once
    table = Table.create(uri, name="orders", record_key="id", schema=SCHEMA, clean_policy=no_window)
    for version in range(3):
        table.write(pa.Table.from_pylist([{"id": 1, "v": str(version)}], schema=SCHEMA))
    runner = CliRunner()
    dry = runner.invoke(cli, ["clean", uri, "--dry-run", "--policy", "keep-latest-commits=1"])
    assert dry.exit_code == 0, dry.output
    assert "would delete 2 files" in dry.output and "outside keep-latest-commits=1" in dry.output
    done = runner.invoke(cli, ["clean", uri, "--policy", "keep-latest-commits=1"])
    assert done.exit_code == 0 and "deleted 2 files" in done.output and "as clean" in done.output
    bad = runner.invoke(cli, ["clean", uri, "--policy", "keep-forever=1"])
    assert bad.exit_code == 2 and "unknown cleaning policy" in bad.output


def test_a_registration_is_durable_before_its_event_is_done() -> None:
    """The handler returns (and the loop stores this event's offset for the next commit) only
    once the registry says the registration is durable: a crash before that leaves the offset
    uncommitted, so the request is delivered again instead of forgotten."""
    h = Harness()
    durable, waiting = asyncio.Event(), asyncio.Event()
    waits: list[str] = []

    async def persisted() -> None:
        waits.append("waited")
        waiting.set()
        await durable.wait()

    h.handler.persisted = persisted
    message = Consumed("t", 4, 0, TABLE.encode(), request(), 0.0)

    async def scenario() -> None:
        handling = asyncio.ensure_future(
            h.handler.handle(message, decode(request()), source="request")
        )
        await asyncio.wait_for(waiting.wait(), 5)  # the handler waits for durability
        assert waits == ["waited"] and not handling.done()  # registered, not yet durable
        assert h.registry[TABLE]["partition"] == 4
        durable.set()
        await asyncio.wait_for(handling, 5)
        # A transition registers nothing: nothing to wait for.
        transition_message = Consumed(
            "t", 4, 1, TABLE.encode(), transition("commit", "completed"), 0.0
        )
        await h.handler.handle(
            transition_message, decode(transition("commit", "completed")), source="transition"
        )

    asyncio.run(scenario())
    assert waits == ["waited"] and h.dlq.sent == []
