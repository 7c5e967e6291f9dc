"""error-sink against the session's real broker, as its own process (``ServiceProcess``).

Main tables are local; their instants are ended by ``FakeWrite`` (what a Spark write leaves
in storage: a job's ``_SUCCESS`` naming the accepted attempts, then ``completed``; or
``rolled_back``). Every test has its own topic prefix (fresh topics and consumer group) and
its own timeline-lock, whose leases the sink's error-table commits take.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from confluent_kafka import Consumer, TopicPartition

import lakewarden
from lakewarden.clients import LockClient
from lakewarden.errortable import error_table_location, open_error_table
from lakewarden.errortable.testing import FakeWrite, settle_marker
from lakewarden.events import (
    EventConsumer,
    EventProducer,
    default_codec,
    ensure_topics,
    make_event,
)
from lakewarden.events.topics import DLQ, ERRORS, JOB_RESULTS, TIMELINE
from lakewarden.settings import ErrorTableSettings, Settings
from lakewarden.table import EmbeddedCoordinator, NotATableError, Table, Timeline
from lakewarden.table.job_commit import STAGE_COMPLETE
from lakewarden.testing import Fault, FaultPlan, wait_until
from lakewarden.testing.faults import ENV_VAR
from lakewarden_services._common.process import ServiceProcess

MODULE = "lakewarden_services.error_sink"
LOCK_MODULE = "lakewarden_services.timeline_lock"
SCHEMA = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("x", pa.int32())])


@pytest.fixture
def sink_settings(kafka_settings: Settings) -> Settings:
    kafka = kafka_settings.kafka.model_copy(update={"topic_prefix": f"es{uuid.uuid4().hex[:8]}."})
    settings = kafka_settings.model_copy(update={"kafka": kafka})
    ensure_topics(settings, specs=[ERRORS, DLQ])
    return settings


@pytest.fixture(autouse=True)
def timeline_lock(sink_settings: Settings, tmp_path: Path) -> Iterator[ServiceProcess]:
    """The sink refuses the embedded coordinator: its commits need timeline-lock."""
    home = tmp_path / "timeline-lock"
    home.mkdir()
    with ServiceProcess(LOCK_MODULE, sink_settings, home=home) as service:
        yield service


def _sink(settings: Settings, home: Path, **env: str) -> ServiceProcess:
    home.mkdir(exist_ok=True)
    extra = {"LAKEWARDEN_ERROR_SINK_CHECK_INTERVAL_S": "0.3", **env}
    return ServiceProcess(MODULE, settings, home=home, extra_env=extra)


@pytest.fixture
def sink(sink_settings: Settings, tmp_path: Path) -> Iterator[ServiceProcess]:
    service = _sink(sink_settings, tmp_path / "sink")
    service.start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def producer(sink_settings: Settings) -> Iterator[EventProducer]:
    producer = EventProducer(sink_settings, producer_id="test-tasks")
    try:
        yield producer
    finally:
        producer.close()


def publish(producer: EventProducer, events: list[dict[str, Any]]) -> None:
    for event in events:
        producer.send("ErrorRecord", event, topic=ERRORS)
    producer.flush(10)


def table(tmp_path: Path, name: str) -> Table:
    return Table.create(str(tmp_path / name), name=name, record_key="id", schema=SCHEMA)


def errors_of(uri: str) -> pa.Table | None:
    try:
        return lakewarden.read(uri)
    except NotATableError:
        return None


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    wait_until(check, timeout_s=timeout_s, what=what)


def rows(uri: str) -> int:
    found = errors_of(uri)
    return 0 if found is None else found.num_rows


def test_only_accepted_attempts_of_completed_instants_once(
    sink: ServiceProcess, producer: EventProducer, tmp_path: Path
) -> None:
    orders = table(tmp_path, "orders")
    errors_uri = error_table_location(orders.uri, "orders", ErrorTableSettings()).uri
    write = FakeWrite(orders)
    loser, winner, other = write.attempt(0, 0), write.attempt(0, 1), write.attempt(1, 0)
    accepted = write.errors(winner, ["w1", "w2", "w3"]) + write.errors(other, ["o1"])
    buffered = sink.metric("lakewarden_error_sink_buffered_records")
    publish(producer, write.errors(loser, ["l1", "l2"]) + accepted)
    aborted = FakeWrite(orders)
    publish(producer, aborted.errors(aborted.attempt(0), ["r1", "r2"]))
    wait_for(
        lambda: sink.metric("lakewarden_error_sink_buffered_records") >= buffered + 8,
        "the sink to buffer all 8 failed records",
    )
    assert rows(errors_uri) == 0, "nothing is committed before the main instant completes"
    write.complete([winner, other], failed_records=4)
    aborted.roll_back()
    publish(producer, accepted)  # redelivered by the tasks' producer
    wait_for(lambda: rows(errors_uri) >= 4, "the accepted errors")
    marker = settle_marker(producer, orders, errors_uri)
    got = errors_of(errors_uri)
    assert got is not None
    got = got.filter(pc.not_equal(got.column("uid"), marker.uid))
    assert sorted(got.column("uid").to_pylist()) == sorted(e["uid"] for e in accepted)
    assert set(got.column("source_instant").to_pylist()) == {write.instant}
    completed = Table.open(errors_uri).state().completed()
    assert len(completed) == 2  # the accepted errors' instant, then the marker's
    assert completed[0].commit is not None
    assert completed[0].commit.error_sources == (f"{orders.table_id}@{write.instant}",)
    # Counted once commit_errors returned, which is after the marker is visible: wait for it.
    wait_for(
        lambda: sink.metric('lakewarden_error_sink_failed_records_total{table="orders"}') == 4 + 1,
        "the sink to count the committed failed records",
    )
    assert sink.metric('lakewarden_error_sink_dropped_total{reason="not_accepted"}') == 2
    assert sink.metric('lakewarden_error_sink_dropped_total{reason="discarded"}') == 2


def test_error_table_commits_take_timeline_locks_lease(
    sink: ServiceProcess,
    producer: EventProducer,
    sink_settings: Settings,
    timeline_lock: ServiceProcess,
    tmp_path: Path,
) -> None:
    """While this test holds the error table's lease at timeline-lock, the sink cannot commit;
    once released it does, and its entries carry later fencing tokens of the same lock."""
    orders = table(tmp_path, "orders")
    location = error_table_location(orders.uri, "orders", ErrorTableSettings())
    errors = open_error_table(location, coordinator=EmbeddedCoordinator())  # learn its id
    write = FakeWrite(orders)
    attempt = write.attempt(0)
    client = LockClient(sink_settings, owner="the-test")
    try:
        with client.hold(errors.table_id, ttl_s=60.0, wait_s=30.0) as lease:
            held = lease.token
            publish(producer, write.errors(attempt, ["k1", "k2"]))
            write.complete([attempt])
            wait_for(
                lambda: timeline_lock.metric("lakewarden_lock_queue_length") >= 1,
                "the sink's commit to queue behind the test's lease",
            )
            assert rows(location.uri) == 0, "the sink committed without timeline-lock's lease"
        wait_for(lambda: rows(location.uri) == 2, "the errors once the lease was released")
    finally:
        client.close()
    entries = list(Timeline(errors.storage, table=errors.name).entries())
    assert entries
    assert all(e.lock_token is not None and e.lock_token > held for e in entries)


def test_undecodable_events_are_dead_lettered_and_the_sink_goes_on(
    sink: ServiceProcess, producer: EventProducer, sink_settings: Settings, tmp_path: Path
) -> None:
    producer.produce_bytes(ERRORS.name(sink_settings), b"not avro", key=b"t")
    orders = table(tmp_path, "orders")
    write = FakeWrite(orders)
    attempt = write.attempt(0)
    publish(producer, write.errors(attempt, ["k1"]))
    write.complete([attempt])
    errors_uri = error_table_location(orders.uri, "orders", ErrorTableSettings()).uri
    wait_for(lambda: rows(errors_uri) == 1, "the error after a poison message")
    assert sink.metric("lakewarden_dead_letters_total") == 1


def test_kill_9_mid_commit_then_restart_loses_nothing_duplicates_nothing(
    sink_settings: Settings, producer: EventProducer, tmp_path: Path
) -> None:
    paused = tmp_path / "paused"  # the sink reached the pause: files placed, not completed
    pause = Fault(
        point="commit_instant.step",
        action="pause",
        where={"step": STAGE_COMPLETE},
        mark=str(paused),
        seconds=120,  # killed long before: the pause only keeps it there
    )
    service = _sink(sink_settings, tmp_path / "sink", **FaultPlan(faults=(pause,)).env())
    orders = table(tmp_path, "orders")
    errors_uri = error_table_location(orders.uri, "orders", ErrorTableSettings()).uri
    write = FakeWrite(orders)
    attempt = write.attempt(0)
    events = write.errors(attempt, [f"k{i}" for i in range(50)])
    service.start()
    try:
        publish(producer, events)
        write.complete([attempt])
        wait_for(paused.exists, "the paused commit")
        service.kill()
        assert rows(errors_uri) == 0  # files placed, instant pending: invisible
        (killed,) = Table.open(errors_uri).state().pending()
        service.extra_env.pop(ENV_VAR)
        service.start()
        wait_for(lambda: rows(errors_uri) >= 50, "the errors after the restart")
        marker = settle_marker(producer, orders, errors_uri)
        got = errors_of(errors_uri)
        assert got is not None
        got = got.filter(pc.not_equal(got.column("uid"), marker.uid))
        assert sorted(got.column("uid").to_pylist()) == sorted(e["uid"] for e in events)
        state = Table.open(errors_uri).state()
        done, _marker = state.completed()
        # The restarted sink resumes the killed instant (its job had committed and its
        # heartbeat is not alive); were the heartbeat still alive, a new instant completes
        # and the killed one stays pending, invisible. Either way: one instant, no duplicate.
        left = [i.instant for i in state.pending()]
        assert left == ([] if done.instant == killed.instant else [killed.instant])
    finally:
        service.stop()


def test_global_mode_collects_every_tables_errors(
    sink_settings: Settings, producer: EventProducer, tmp_path: Path
) -> None:
    base = tmp_path / "global"
    service = _sink(
        sink_settings,
        tmp_path / "sink",
        LAKEWARDEN_ERROR_TABLE__NAME="all_errors",
        LAKEWARDEN_ERROR_TABLE__BASE_PATH=str(base),
    )
    service.start()
    try:
        expected = []
        for name in ("orders", "payments"):
            write = FakeWrite(table(tmp_path, name))
            attempt = write.attempt(0)
            events = write.errors(attempt, [f"{name}-{i}" for i in range(3)])
            expected += [e["uid"] for e in events]
            publish(producer, events)
            write.complete([attempt])
        uri = str(base / "all_errors")
        wait_for(lambda: rows(uri) >= 6, "both tables' errors in the global table")
        got = errors_of(uri)
        assert got is not None
        assert sorted(got.column("uid").to_pylist()) == sorted(expected)
        assert set(got.column("source_table").to_pylist()) == {"orders", "payments"}
        assert not (tmp_path / "orders_errors").exists()
    finally:
        service.stop()


def test_poison_error_record_is_dead_lettered_and_the_offset_moves_past_it(
    sink_settings: Settings, producer: EventProducer, tmp_path: Path
) -> None:
    """Issue 17 (reliab 1): a well-formed record naming a table that does not exist used to
    stay pending forever and pin the partition's committed offset. With small bounds (3
    checks over 1 s) it is dead-lettered with its original bytes, the group's committed offset
    passes it, and a good record of the same table after it is still written."""
    service = _sink(
        sink_settings,
        tmp_path / "sink",
        LAKEWARDEN_ERROR_SINK_GIVE_UP_AFTER_S="1",
        LAKEWARDEN_ERROR_SINK_GIVE_UP_AFTER_CHECKS="3",
    )
    orders = table(tmp_path, "orders")
    errors_uri = error_table_location(orders.uri, "orders", ErrorTableSettings()).uri
    poison_write = FakeWrite(orders)
    (poison,) = poison_write.errors(poison_write.attempt(0), ["p1"])
    poison["context"] = {**poison["context"], "tableUri": str(tmp_path / "no-such-table")}
    good_write = FakeWrite(orders)  # same table id: same key, same partition, later offset
    good_attempt = good_write.attempt(0)
    service.start()
    try:
        publish(producer, [poison])
        publish(producer, good_write.errors(good_attempt, ["g1", "g2"]))
        good_write.complete([good_attempt])
        with EventConsumer(sink_settings, group_id="dlq-reader", topics=[DLQ]) as consumer:
            letter = next(consumer.events(idle_timeout_s=60)).record  # the first one
        assert letter["reason"] == "unresolved_source"
        assert poison_write.instant in letter["detail"] and "no-such-table" in letter["detail"]
        name, record = default_codec().decode(letter["value"])
        assert name == "ErrorRecord" and record["uid"] == poison["uid"]  # the original bytes
        wait_for(lambda: rows(errors_uri) == 2, "the good records after the poison one")
        group = f"{sink_settings.kafka.topic_prefix}error-sink"
        spot = TopicPartition(ERRORS.name(sink_settings), letter["partition"])
        wait_for(
            lambda: committed_offset(sink_settings, group, spot) > letter["offset"],
            "the committed offset to move past the poison record",
        )
        status, body = service.get("/health")
        assert status == 200 and '"unresolved_sources": 0' in body
    finally:
        service.stop()


def committed_offset(settings: Settings, group: str, spot: TopicPartition) -> int:
    consumer = Consumer(settings.kafka.librdkafka_config(group_id=group))
    try:
        (found,) = consumer.committed([spot], timeout=10)
        return int(found.offset)
    finally:
        consumer.close()


def test_a_timeline_event_gets_the_instant_read_at_once_not_at_the_fallback(
    sink_settings: Settings, producer: EventProducer, tmp_path: Path
) -> None:
    """With the fallback at 10 minutes, only the ``TimelineTransition`` that says the
    instant completed can get its errors committed within the wait: the sink is driven by the
    event, and reads storage (the truth) when it comes."""
    ensure_topics(sink_settings, specs=[TIMELINE, JOB_RESULTS])
    service = _sink(sink_settings, tmp_path / "sink", LAKEWARDEN_ERROR_SINK_FALLBACK_CHECK_S="600")
    orders = table(tmp_path, "orders")
    errors_uri = error_table_location(orders.uri, "orders", ErrorTableSettings()).uri
    write = FakeWrite(orders)
    attempt = write.attempt(0)
    service.start()
    try:
        buffered = service.metric("lakewarden_error_sink_buffered_records")
        publish(producer, write.errors(attempt, ["h1", "h2"]))
        wait_for(
            lambda: service.metric("lakewarden_error_sink_buffered_records") >= buffered + 2,
            "the sink to buffer the records",
        )
        wait_for(
            lambda: service.metric("lakewarden_error_sink_storage_reads_total") >= 1,
            "the first read of the new key, which says pending",
        )
        write.complete([attempt])  # embedded coordinator: no event of its own
        reads = service.metric("lakewarden_error_sink_storage_reads_total")
        checks = service.metric("lakewarden_error_sink_checks_total")
        wait_for(
            lambda: service.metric("lakewarden_error_sink_checks_total") >= checks + 3,
            "three more checks of the sink",
        )
        assert service.metric("lakewarden_error_sink_storage_reads_total") == reads
        assert rows(errors_uri) == 0, "no event yet, and the fallback is 10 minutes away"
        event = make_event(
            "TimelineTransition",
            table_id=orders.table_id,
            producer_id="test-writer",
            seq=3,  # the sink reads the instant and the transition only
            instant=write.instant,
            action="commit",
            transition="completed",
            actor="test-writer",
            lock_token=None,
            wall_time=0,
            payload="{}",
        )
        producer.send("TimelineTransition", event, topic=TIMELINE)
        producer.flush(10)
        wait_for(lambda: rows(errors_uri) >= 2, "the errors after the timeline event", 20.0)
    finally:
        service.stop()
