"""CleanerRegistration: a located table's first announced entry registers it with the cleaner
(one CleanRequest naming its URI), once per process; the cleaner's own entries never do; a
failed registration is counted, never raised, and retried at the next entry. Table and the
Kafka coordinator wire it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakewarden.clients import KafkaCoordinator
from lakewarden.clients.clean_registration import REGISTERED_BY, CleanerRegistration
from lakewarden.clients.timeline_events import TimelinePublisher
from lakewarden.errors import RetryableError
from lakewarden.events import EventDeliveryError, default_codec
from lakewarden.events.topics import CLEAN_REQUESTS
from lakewarden.settings import Settings
from lakewarden.storage.local import LocalStorage
from lakewarden.table import EmbeddedCoordinator, Table
from lakewarden.table.config import TableConfig
from lakewarden.table.instant import Action, Transition
from lakewarden.table.timeline_state import TimelineEntry
from lakewarden.testing import SimulatedCrash


def _entry(
    action: Action = Action.COMMIT, transition: Transition = Transition.REQUESTED
) -> TimelineEntry:
    return TimelineEntry(
        seq=0,
        instant="20251123120000000",
        action=action,
        transition=transition,
        actor="writer-1",
        lock_token=1,
        wall_time_ms=1_763_900_000_123,
        payload={},
    )


class _Producer:
    def __init__(self, *, fail: bool = False) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.connected: list[object] = []
        self.fail = fail

    def send(self, event: str, record: dict[str, Any], **_: object) -> None:
        self.sent.append((event, record))

    def flush(self, timeout_s: float | None = None) -> None:
        if self.fail:
            raise EventDeliveryError([("lakewarden.clean.requests", "broker down")], 1)

    def connect(self, topic: object, timeout_s: float | None = None) -> None:
        if self.fail:
            raise RetryableError("Cannot reach the broker for lakewarden.clean.requests")
        self.connected.append(topic)


def _registration(producer: _Producer) -> CleanerRegistration:
    return CleanerRegistration(Settings(), producer=producer)  # type: ignore[arg-type]


def test_the_first_entry_of_a_located_table_registers_it_once() -> None:
    producer = _Producer()
    registration = _registration(producer)
    registration.locate("table-1", "s3://bucket/t1")

    assert registration.announced("table-1", _entry())
    assert not registration.announced("table-1", _entry(transition=Transition.COMPLETED))

    [(name, record)] = producer.sent
    decoded = default_codec().decode(default_codec().encode(name, record))
    assert decoded.name == "CleanRequest"
    fields = decoded.record
    assert fields["envelope"]["table_id"] == "table-1"
    assert fields["table_uri"] == "s3://bucket/t1"
    assert fields["requested_by"] == f"{REGISTERED_BY}:writer-1"
    assert fields["policy"] is None and fields["delete_orphans"] is False


def test_a_table_of_unknown_location_or_the_cleaners_own_entries_register_nothing() -> None:
    producer = _Producer()
    registration = _registration(producer)
    assert not registration.announced("elsewhere", _entry())
    registration.locate("table-1", "/data/t1")
    assert not registration.announced("table-1", _entry(Action.CLEAN))
    assert not registration.announced("table-1", _entry(Action.ROLLBACK))
    assert producer.sent == []
    assert registration.announced("table-1", _entry(Action.CLUSTERING))


def test_a_failed_registration_is_counted_and_retried_at_the_next_entry() -> None:
    producer = _Producer(fail=True)
    registration = _registration(producer)
    registration.locate("table-1", "/data/t1")

    assert not registration.announced("table-1", _entry())
    assert registration.failed == 1
    producer.fail = False
    assert registration.announced("table-1", _entry(transition=Transition.COMPLETED))
    assert len(producer.sent) == 2  # the lost one and its retry


class _Locating(EmbeddedCoordinator):
    def __init__(self) -> None:
        super().__init__()
        self.located: list[tuple[str, str]] = []

    def register_table(self, table_id: str, uri: str) -> None:
        self.located.append((table_id, uri))


def test_a_table_tells_its_coordinator_where_it_lives(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    config = TableConfig.new(
        name="t", record_key="id", schema=pa.schema([pa.field("id", pa.int64(), nullable=False)])
    )
    coordinator = _Locating()
    table = Table(storage, config, coordinator=coordinator)
    assert coordinator.located == [(table.table_id, storage.uri)]


def test_the_kafka_coordinator_registers_a_table_at_its_first_announced_entry() -> None:
    producer = _Producer()
    settings = Settings()
    coordinator = KafkaCoordinator(
        settings,
        timeline_events=TimelinePublisher(settings, producer=_Producer()),  # type: ignore[arg-type]
        registration=_registration(producer),
    )
    coordinator.register_table("table-1", "/data/t1")
    coordinator.announce("table-1", _entry())
    coordinator.announce("table-1", _entry(transition=Transition.COMPLETED))
    assert [record["table_uri"] for _, record in producer.sent] == ["/data/t1"]


def test_no_registration_waits_on_a_broker_that_just_lost_the_announcement() -> None:
    producer = _Producer()
    settings = Settings()
    timeline = _Producer(fail=True)
    coordinator = KafkaCoordinator(
        settings,
        timeline_events=TimelinePublisher(settings, producer=timeline),  # type: ignore[arg-type]
        registration=_registration(producer),
    )
    coordinator.register_table("table-1", "/data/t1")
    coordinator.announce("table-1", _entry())
    assert producer.sent == []
    timeline.fail = False
    coordinator.announce("table-1", _entry(transition=Transition.COMPLETED))
    assert len(producer.sent) == 1


def test_a_table_is_registered_again_after_the_interval_while_it_is_written() -> None:
    """A registration lost after it was published (a cleaner killed before its registry had
    it) is repeated by a long-lived writer: at its first entry an interval later."""
    producer = _Producer()
    now = [100.0]
    registration = CleanerRegistration(
        Settings(),
        producer=producer,  # type: ignore[arg-type]
        reregister_after_s=60.0,
        clock=lambda: now[0],
    )
    registration.locate("table-1", "/data/t1")
    assert registration.announced("table-1", _entry())
    now[0] = 159.0
    assert not registration.announced("table-1", _entry(transition=Transition.COMPLETED))
    now[0] = 160.0
    assert registration.announced("table-1", _entry(transition=Transition.COMPLETED))
    assert not registration.announced("table-1", _entry())
    assert [record["table_uri"] for _, record in producer.sent] == ["/data/t1", "/data/t1"]


def test_a_table_is_registered_before_its_first_requested_entry_and_only_once() -> None:
    producer = _Producer()
    registration = _registration(producer)
    assert not registration.before_first_entry("table-1", "writer-1")  # location unknown
    registration.locate("table-1", "/data/t1")

    assert registration.before_first_entry("table-1", "writer-1")
    assert not registration.before_first_entry("table-1", "writer-1")
    assert not registration.announced("table-1", _entry())  # registered already
    assert [record["table_uri"] for _, record in producer.sent] == ["/data/t1"]


def test_a_failed_registration_before_the_first_entry_is_retried_at_the_announcement() -> None:
    producer = _Producer(fail=True)
    registration = _registration(producer)
    registration.locate("table-1", "/data/t1")
    assert not registration.before_first_entry("table-1", "writer-1")
    producer.fail = False
    assert registration.announced("table-1", _entry())
    assert registration.failed == 1


class _KilledAfterItsFirstAppend(EmbeddedCoordinator):
    """Records the order of the registration and the announcement, and dies at the first
    announcement: a writer killed between appending ``requested`` and announcing it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def before_requested(self, table_id: str, actor: str) -> None:
        self.calls.append("before_requested")

    def announce(self, table_id: str, entry: TimelineEntry) -> None:
        self.calls.append(f"announce {entry.transition}")
        raise SimulatedCrash("killed before announcing its first entry")


def test_requested_left_behind_a_writer_killed_after_its_first_append_registered_first(
    tmp_path: Path,
) -> None:
    """Campaign seed 5021: the table's only writer was killed right after appending its first
    ``requested``, before announcing it, so the cleaner never heard of the table and the dead
    instant stayed. The registration now comes before the append."""
    storage = LocalStorage(str(tmp_path))
    config = TableConfig.new(
        name="t", record_key="id", schema=pa.schema([pa.field("id", pa.int64(), nullable=False)])
    )
    coordinator = _KilledAfterItsFirstAppend()
    table = Table(storage, config, coordinator=coordinator)
    try:
        table.write(pa.table({"id": pa.array([1], pa.int64())}), "insert")
    except SimulatedCrash:
        pass
    assert coordinator.calls == ["before_requested", "announce requested"]


def test_connect_reaches_the_topic_ahead_and_registers_nothing() -> None:
    """A streaming process connects on a batch without rows, so its first ``requested``
    entry waits for one delivery, not for a new producer."""
    producer = _Producer()
    registration = _registration(producer)
    registration.locate("table-1", "/data/t1")
    registration.connect()
    assert producer.connected == [CLEAN_REQUESTS] and producer.sent == []
    assert registration.before_first_entry("table-1", "writer-1")


def test_a_failing_connect_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    registration = _registration(_Producer(fail=True))
    registration.connect()
    assert "cleaner registration not connected yet" in caplog.text


class _Connects:
    """Stands in for one of the coordinator's clients: counts ``connect``."""

    def __init__(self) -> None:
        self.connects = 0

    def connect(self) -> None:
        self.connects += 1


def test_the_coordinator_connects_the_writers_clients_only_for_a_writer() -> None:
    """The cleaner connects with ``writes=False``: it neither beats nor registers tables, so
    it keeps no idle heartbeat producer or registration producer."""
    lock, timeline, heartbeats, registration = _Connects(), _Connects(), _Connects(), _Connects()
    coordinator = KafkaCoordinator(
        Settings(),
        client=lock,  # type: ignore[arg-type]
        timeline_events=timeline,  # type: ignore[arg-type]
        heartbeats=heartbeats,  # type: ignore[arg-type]
        registration=registration,  # type: ignore[arg-type]
    )
    coordinator.connect(writes=False)
    assert (lock.connects, timeline.connects) == (1, 1)
    assert (heartbeats.connects, registration.connects) == (0, 0)
    coordinator.connect()
    assert (heartbeats.connects, registration.connects) == (1, 1)
