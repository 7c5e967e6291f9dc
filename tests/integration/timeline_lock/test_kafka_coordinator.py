"""KafkaCoordinator: Table transactions hold timeline-lock's lease; heartbeats and liveness
through heartbeat-monitor's topics."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from _job_committers import JobCommitters

import lakewarden.events.producer as producer_module
from lakewarden.clients import KafkaCoordinator, LockClient
from lakewarden.errors import ConfigurationError
from lakewarden.events import ensure_topics
from lakewarden.settings import KafkaSettings, Settings
from lakewarden.table import (
    EmbeddedCoordinator,
    Liveness,
    LockReentryError,
    LockTimeoutError,
    Table,
    close_shared_connections,
    connect,
    shared_connection,
)
from lakewarden.table.instant import Action, Transition
from lakewarden.table.timeline_state import TimelineEntry
from lakewarden.testing import wait_until
from lakewarden_services._common.process import ServiceProcess

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def coordinator(
    shared_lock_settings: Settings, shared_lock_service: ServiceProcess
) -> Iterator[KafkaCoordinator]:
    ensure_topics(shared_lock_settings)
    coordinator = KafkaCoordinator(shared_lock_settings)
    yield coordinator
    coordinator.close()


def test_table_writes_take_the_lease_and_entries_record_its_tokens(
    coordinator: KafkaCoordinator,
    shared_lock_settings: Settings,
    job_committer: JobCommitters,
    tmp_path: Path,
) -> None:
    job_committer.ensure(shared_lock_settings)  # Table.write commits through it (the default)
    uri = str(tmp_path / "orders")
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    Table.create(uri, name="orders-kc", record_key="id", schema=schema)
    table = Table.open(uri, coordinator=coordinator)
    for v in ("a", "b"):
        table.write(pa.table({"id": pa.array([1, 2], pa.int64()), "v": [v, v]}))
    tokens = [entry.lock_token for entry in table.timeline_log.entries()]
    # requested, inflight, completed per write: each step took the lock with a new token
    # (completed by job-committer, under a lease of its own)
    assert len(tokens) == 6 and tokens == sorted(tokens) and len(set(tokens)) == 6
    completed = [e for e in table.timeline_log.entries() if e.transition == "completed"]
    assert [e.actor.split("@")[0] for e in completed] == ["job-committer"] * 2
    assert table.read().column("v").to_pylist() == ["b", "b"]


def test_the_same_thread_cannot_take_a_table_lock_twice(coordinator: KafkaCoordinator) -> None:
    with coordinator.lock("reentry", ttl_s=5, wait_s=5) as lease:
        with pytest.raises(LockReentryError, match="already holds the lock of table reentry"):
            with coordinator.lock("reentry", ttl_s=5, wait_s=5):
                pass
        other: list[int] = []
        thread = threading.Thread(
            target=lambda: other.append(coordinator.client.acquire("other", ttl_s=5).token)
        )
        thread.start()
        thread.join(10)
        assert other == [1] and not lease.lost


def test_a_lock_takes_up_the_acquire_sent_ahead(coordinator: KafkaCoordinator) -> None:
    client = coordinator.client
    coordinator.lock_ahead("ahead", ttl_s=5)
    sent = coordinator._ahead["ahead"]
    with coordinator.lock("ahead", ttl_s=5, wait_s=5) as lease:
        # The lease is the grant of the acquire sent ahead: no second acquire was sent.
        assert lease.request_id == sent.request_id and not lease.lost
        assert coordinator._ahead == {}
        # Held: an acquire of another client waits (FIFO) until the section ends.
        with pytest.raises(LockTimeoutError):
            client.acquire("ahead", ttl_s=5, wait_s=0.5)
    assert client.acquire("ahead", ttl_s=5, wait_s=5).token == lease.token + 1


def test_an_acquire_sent_ahead_and_not_taken_up_is_withdrawn(
    coordinator: KafkaCoordinator, shared_lock_settings: Settings
) -> None:
    coordinator.lock_ahead("dropped", ttl_s=30)
    sent = coordinator._ahead["dropped"]
    wait_until(sent.future.done, what="the acquire sent ahead granted")  # nobody waits for it
    coordinator.drop_lock_ahead("dropped")
    other = LockClient(shared_lock_settings, owner="other")
    try:
        # Withdrawn, so released: another owner gets the lock at once, not after 30 s.
        assert not other.acquire("dropped", ttl_s=5, wait_s=5).lost
    finally:
        other.close()


def test_a_lock_with_another_ttl_withdraws_the_acquire_sent_ahead(
    coordinator: KafkaCoordinator, shared_lock_settings: Settings
) -> None:
    coordinator.lock_ahead("ttl", ttl_s=30)
    sent = coordinator._ahead["ttl"]
    wait_until(sent.future.done, what="the acquire sent ahead granted")
    with coordinator.lock("ttl", ttl_s=5, wait_s=5) as lease:
        # Its own acquire, granted once the withdrawn one's lease ended.
        assert lease.request_id != sent.request_id and lease.ttl_s == 5
    assert coordinator._ahead == {}
    other = LockClient(shared_lock_settings, owner="other")
    try:
        assert not other.acquire("ttl", ttl_s=5, wait_s=5).lost  # nothing left holding it
    finally:
        other.close()


def test_liveness_is_alive_while_this_process_beats_and_unknown_without_a_monitor(
    coordinator: KafkaCoordinator,
) -> None:
    instant = "20260101000000000"
    # heartbeat-monitor does not run here: its verdicts cannot be read, never "dead"
    assert coordinator.liveness("orders", instant) is Liveness.UNKNOWN
    with coordinator.heartbeat("orders", instant, "writer-1"):
        assert coordinator.liveness("orders", instant) is Liveness.ALIVE
    assert coordinator.liveness("orders", instant) is Liveness.UNKNOWN


def test_connect_starts_every_client_a_first_write_needs(
    coordinator: KafkaCoordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After ``connect`` (a streaming process's batch without rows), a first write's steps
    make no producer: its lock, registration, announcement and heartbeat wait for one round
    trip each, not for a client's start."""
    coordinator.connect()
    made: list[dict[str, object]] = []
    real = producer_module.Producer
    monkeypatch.setattr(
        producer_module, "Producer", lambda config: made.append(config) or real(config)
    )
    entry = TimelineEntry(
        seq=0,
        instant="20260101000000000",
        action=Action.COMMIT,
        transition=Transition.REQUESTED,
        actor="writer-1",
        lock_token=1,
        wall_time_ms=1_767_225_600_000,
        payload={},
    )
    coordinator.register_table("first-write", "/data/first-write")
    coordinator.before_requested("first-write", "writer-1")
    with coordinator.lock("first-write"):
        coordinator.announce("first-write", entry)
    with coordinator.heartbeat("first-write", entry.instant, "writer-1"):
        pass
    assert made == []
    assert coordinator.registration.failed == 0 and coordinator.timeline_events.failed == 0


def test_connect_picks_kafka_when_configured(shared_lock_settings: Settings) -> None:
    with connect(shared_lock_settings, require_kafka=True) as connection:
        assert isinstance(connection.coordinator, KafkaCoordinator)
    without_kafka = Settings(kafka=KafkaSettings())
    with connect(without_kafka) as connection:
        assert isinstance(connection.coordinator, EmbeddedCoordinator)
    with pytest.raises(ConfigurationError, match="Help: set LAKEWARDEN_KAFKA__BOOTSTRAP"):
        connect(without_kafka, require_kafka=True)


def test_table_open_with_kafka_settings_alone_uses_timeline_lock(
    shared_lock_settings: Settings, tmp_path: Path
) -> None:
    uri = str(tmp_path / "t")
    without_kafka = Settings(kafka=KafkaSettings())
    created = Table.create(
        uri,
        name="t",
        record_key="id",
        schema=pa.schema([("id", pa.int64())]),
        settings=without_kafka,
    )
    try:
        opened = Table.open(uri, settings=shared_lock_settings)
        assert isinstance(opened.coordinator, KafkaCoordinator)
        assert opened.coordinator is shared_connection(shared_lock_settings).coordinator
        assert isinstance(created.coordinator, EmbeddedCoordinator)
        assert Table.open(uri, settings=without_kafka).coordinator is created.coordinator
    finally:
        close_shared_connections()
