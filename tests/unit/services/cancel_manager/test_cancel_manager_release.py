"""cancel-manager's latency-driven parts, without Kafka: a ``request`` keeps its table lock until
its result is out (then releases it), ``execute`` gives the lock up before deleting files as
RFC-79 says, and the ``tables`` registry writes its changelog where the request came from and
says when that is not durable."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from test_cancel_manager_handler import Harness, fragmented_table

from lakewarden.api.table import Table
from lakewarden.events import Event
from lakewarden.storage import StorageError
from lakewarden.table.coordinator import EmbeddedCoordinator, Lease
from lakewarden_services._common.registry import (
    RegistryNotDurableError,
    TablesRegistry,
    changelog_key,
)


class RecordingCoordinator(EmbeddedCoordinator):
    """Logs every lock section's acquire and release into ``log``."""

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    @contextmanager
    def lock(self, table_id: str, *, ttl_s: float = 30.0, wait_s: float = 30.0) -> Iterator[Lease]:
        with super().lock(table_id, ttl_s=ttl_s, wait_s=wait_s) as lease:
            self.log.append("acquire")
            try:
                yield lease
            finally:
                self.log.append("release")


class AheadCoordinator(RecordingCoordinator):
    """A coordinator whose lock is remote (as ``KafkaCoordinator``'s is): logs acquires sent
    ahead, the lock sections that take them up, and those withdrawn."""

    def __init__(self, log: list[str]) -> None:
        super().__init__(log)
        self.ahead: tuple[str, float] | None = None

    def lock_ahead(self, table_id: str, *, ttl_s: float = 30.0) -> None:
        self.log.append(f"ahead {ttl_s:g}")
        self.ahead = (table_id, ttl_s)

    def drop_lock_ahead(self, table_id: str) -> None:
        if self.ahead is not None and self.ahead[0] == table_id:
            self.log.append("withdrawn")
        self.ahead = None

    @contextmanager
    def lock(self, table_id: str, *, ttl_s: float = 30.0, wait_s: float = 30.0) -> Iterator[Lease]:
        if self.ahead == (table_id, ttl_s):
            self.log.append("taken up")
            self.ahead = None
        with super().lock(table_id, ttl_s=ttl_s, wait_s=wait_s) as lease:
            yield lease


def _recording(table: Table, log: list[str], *, ahead: bool = False) -> Harness:
    """A harness whose worker locks through a ``RecordingCoordinator`` (``AheadCoordinator``
    with ``ahead``) and logs its results."""
    coordinator = AheadCoordinator(log) if ahead else RecordingCoordinator(log)
    h = Harness()
    h.worker.coordinator = lambda: coordinator
    table.coordinator = coordinator
    sent = h.requests.send_result

    async def send_result(table_id: str, event: Event) -> None:
        log.append(f"result {event.record['status']}")
        await sent(table_id, event)

    h.requests.send_result = send_result
    return h


def _requested_ahead(table: Table) -> tuple[Harness, str, list[str]]:
    """A cancellable plan with a cancel request, asked through a harness that sends its
    acquires ahead (the table is open), and the harness's log cleared after it."""
    instant = str(table.schedule_clustering(cancellable=True))
    log: list[str] = []
    h = _recording(table, log, ahead=True)
    h.ask(table, instant, "request")
    log.clear()
    return h, instant, log


@pytest.fixture
def table(tmp_path: Path) -> Table:
    return fragmented_table(tmp_path, EmbeddedCoordinator())


def test_a_request_releases_its_lock_after_its_result(table: Table) -> None:
    instant = str(table.schedule_clustering(cancellable=True))
    log: list[str] = []
    h = _recording(table, log)
    assert h.ask(table, instant, "request").record["status"] == "accepted"
    assert h.ask(table, instant, "request").record["status"] == "already_requested"
    assert log == [
        *("acquire", "result accepted", "release"),
        *("acquire", "result already_requested", "release"),
    ]


def test_a_refused_request_releases_its_lock_too(table: Table) -> None:
    fixed = str(table.schedule_clustering(cancellable=False))
    log: list[str] = []
    h = _recording(table, log)
    assert h.ask(table, fixed, "request").record["status"] == "not_cancellable"
    assert log == ["acquire", "result not_cancellable", "release"]
    # And the lock is free: another holder gets it at once.
    with table.coordinator.lock(table.table_id, wait_s=0.5):
        pass


def test_a_request_on_an_open_table_sends_its_acquire_ahead(table: Table) -> None:
    instant = str(table.schedule_clustering(cancellable=True))
    log: list[str] = []
    h = _recording(table, log, ahead=True)
    # The first request opens the table: its lock is asked for where request_cancel takes it.
    assert h.ask(table, instant, "request").record["status"] == "accepted"
    assert log == ["acquire", "result accepted", "release"]
    log.clear()
    # Then the acquire goes out as soon as the request is read (before it is decoded), for
    # request_cancel's ttl, and request_cancel's lock section takes it up: granted before
    # the reload, as before.
    assert h.ask(table, instant, "request").record["status"] == "already_requested"
    assert log == ["ahead 30", "taken up", "acquire", "result already_requested", "release"]


def test_an_execute_takes_the_acquire_sent_ahead_up_in_its_first_lock_section(
    table: Table,
) -> None:
    h, instant, log = _requested_ahead(table)
    assert h.ask(table, instant, "execute").record["status"] == "aborted"
    sections = (len(log) - 3) // 2
    assert log == ["ahead 30", "taken up", *["acquire", "release"] * sections, "result aborted"]


def test_a_malformed_request_withdraws_the_acquire_sent_ahead(table: Table) -> None:
    h, instant, log = _requested_ahead(table)
    h.feed(b"not an event", key=table.table_id.encode())
    assert log == ["ahead 30", "withdrawn"] and h.dlq.sent


def test_an_acquire_sent_ahead_that_no_lock_takes_up_is_withdrawn(
    table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    h, instant, log = _requested_ahead(table)

    def broken(self: Table, *args: object, **kwargs: object) -> None:
        raise StorageError("the store failed before the lock was taken")

    monkeypatch.setattr(Table, "request_cancel", broken)
    assert h.ask(table, instant, "request").record["status"] == "failed"
    assert log == ["ahead 30", "result failed", "withdrawn"]


def test_execute_gives_the_lock_up_before_deleting_files_and_before_its_result(
    table: Table,
) -> None:
    instant = str(table.schedule_clustering(cancellable=True))
    log: list[str] = []
    h = _recording(table, log)
    h.ask(table, instant, "request")
    log.clear()
    assert h.ask(table, instant, "execute").record["status"] == "aborted"
    # RFC-79: check under the lock, release, roll back, append `aborted` under the lock:
    # every section released as it ends (none kept), all before the result.
    sections = len(log) // 2
    assert sections >= 2 and log == [*["acquire", "release"] * sections, "result aborted"]


class FakeProducer:
    """``TablesRegistry``'s produce and poll, with delivery reports on poll."""

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.produced: list[tuple[bytes, bytes, int]] = []
        self._reports: list[Callable[[Any, Any], None]] = []

    def produce(
        self, key: bytes, value: bytes, partition: int, on_delivery: Callable[[Any, Any], None]
    ) -> None:
        self.produced.append((key, value, partition))
        self._reports.append(on_delivery)

    def poll(self, timeout_s: float) -> int:
        reports, self._reports = self._reports, []
        for report in reports:
            report("broker down" if self.fail else None, None)
        return len(reports)


def test_the_registry_writes_where_the_request_came_and_waits_for_it() -> None:
    producer = FakeProducer()
    registry = TablesRegistry(produce=producer.produce, poll=producer.poll)
    registry.partition = 4
    registry["t1"] = "s3://b/t1"
    assert producer.produced == [(changelog_key("t1"), json.dumps("s3://b/t1").encode(), 4)]
    registry.wait_durable(1.0)
    assert dict(registry) == {"t1": "s3://b/t1"}
    registry.forget_all()
    assert len(registry) == 0
    skipped = registry.load({changelog_key("t2"): b'"/data/t2"', b"junk": b"{"})
    assert dict(registry) == {"t2": "/data/t2"} and skipped == [b"junk"]


def test_an_unacknowledged_registration_is_an_error() -> None:
    producer = FakeProducer(fail=True)
    registry = TablesRegistry(produce=producer.produce, poll=producer.poll)
    registry["t1"] = "/data/t1"
    with pytest.raises(RegistryNotDurableError, match="broker down"):
        registry.wait_durable(1.0)
    silent = TablesRegistry(produce=lambda *_: None, poll=lambda _: None)
    silent["t1"] = "/data/t1"
    with pytest.raises(RegistryNotDurableError, match="1 still in flight"):
        silent.wait_durable(0.1)
