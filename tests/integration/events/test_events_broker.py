"""Events through a real Kafka broker: topics, every event type, the dead-letter queue."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from lakewarden.clients.timeline_events import TimelinePublisher
from lakewarden.events import (
    DLQ,
    TOPICS,
    ConsumedEvent,
    EventConsumer,
    EventConsumerError,
    EventDeliveryError,
    EventProducer,
    Rejection,
    encode,
    ensure_topics,
    sample_events,
    topic_for_event,
)
from lakewarden.events.codec import MAGIC
from lakewarden.events.topics import HEARTBEATS, LIVENESS_CHANGELOG, TIMELINE
from lakewarden.settings import Settings
from lakewarden.table.instant import Action, Transition
from lakewarden.table.timeline_state import TimelineEntry

pytestmark = pytest.mark.kafka


@pytest.fixture
def settings(kafka_settings: Settings) -> Settings:
    """The session broker with a topic prefix of this test's own, so tests never share topics."""
    prefix = f"t{uuid.uuid4().hex[:8]}.lakewarden."
    kafka = kafka_settings.kafka.model_copy(update={"topic_prefix": prefix})
    return kafka_settings.model_copy(update={"kafka": kafka})


@pytest.fixture
def topics(settings: Settings) -> list[str]:
    return ensure_topics(settings)


def _consumer(settings: Settings, group: str, *topics: str) -> EventConsumer:
    return EventConsumer(settings, group_id=group, topics=topics, consumer_id=f"test-{group}")


def _drain(consumer: EventConsumer, count: int, timeout_s: float = 30.0) -> list[ConsumedEvent]:
    events: list[ConsumedEvent] = []
    for event in consumer.events(idle_timeout_s=timeout_s):
        events.append(event)
        if len(events) == count:
            break
    return events


def test_ensure_topics_creates_every_topic_once(settings: Settings, topics: list[str]) -> None:
    assert sorted(topics) == sorted(spec.name(settings) for spec in TOPICS)
    assert ensure_topics(settings) == []  # idempotent: everything exists now

    admin = AdminClient(settings.kafka.librdkafka_config())
    metadata = admin.list_topics(timeout=10)
    for spec in TOPICS:
        assert len(metadata.topics[spec.name(settings)].partitions) == spec.partitions
    resources = [ConfigResource("topic", spec.name(settings)) for spec in (TIMELINE, HEARTBEATS)]
    configs = {r.name: f.result(10) for r, f in admin.describe_configs(resources).items()}
    assert configs[TIMELINE.name(settings)]["retention.ms"].value == "-1"
    assert configs[HEARTBEATS.name(settings)]["retention.ms"].value == str(HEARTBEATS.retention_ms)


def test_every_event_type_round_trips(settings: Settings, topics: list[str]) -> None:
    # Every event has a topic: the services' topics, and heartbeat-monitor's liveness view
    # (which the monitor creates itself, so ensure_topics leaves it out).
    every = (*TOPICS, LIVENESS_CHANGELOG)
    ensure_topics(settings, specs=[LIVENESS_CHANGELOG])
    sent = sample_events(table_id="orders", producer_id="it-producer")
    with EventProducer(settings, producer_id="it-producer") as producer:
        for name, record in sent.items():
            producer.send(name, record)
        producer.flush()
    assert producer.delivered == len(sent)

    consumer = _consumer(settings, "round-trip", *(spec.name(settings) for spec in every))
    try:
        received = {event.name: event for event in _drain(consumer, len(sent))}
    finally:
        consumer.close()

    assert set(received) == set(sent)
    for name, event in received.items():
        assert event.topic == topic_for_event(name).name(settings)
        assert event.key == b"orders"
        assert event.record["envelope"]["event_id"] == sent[name]["envelope"]["event_id"]
        expected_fields = {k: v for k, v in sent[name].items() if k != "envelope"}
        assert {k: v for k, v in event.record.items() if k != "envelope"} == expected_fields
    assert consumer.dead_lettered == 0


@pytest.fixture
def raw_producer(settings: Settings) -> Iterator[EventProducer]:
    producer = EventProducer(settings, producer_id="poisoner")
    yield producer
    producer.close()


def test_poison_messages_go_to_the_dlq_and_consuming_goes_on(
    settings: Settings, topics: list[str], raw_producer: EventProducer
) -> None:
    heartbeats = HEARTBEATS.name(settings)
    events = sample_events(table_id="t1")
    good = encode("Heartbeat", events["Heartbeat"])
    unknown = MAGIC + b"\x11" * 8 + good[10:]
    poison = [
        (b"\x00garbage, not avro", "bad_magic"),
        (unknown, "unknown_fingerprint"),
        (b"", "too_short"),
    ]
    # Everything on one partition, so the order is known: good, 3 poisons, good, good.
    values = [good, *(value for value, _ in poison), good, good]
    for value in values:
        raw_producer.produce_bytes(heartbeats, value, key=b"t1", partition=0)
    raw_producer.flush()

    consumer = _consumer(settings, "monitor", heartbeats)
    try:
        received = _drain(consumer, 3)
        consumer.commit()
    finally:
        consumer.close()

    assert [e.offset for e in received] == [0, 4, 5]
    assert all(e.name == "Heartbeat" for e in received)
    assert consumer.dead_lettered == 3

    dlq = _consumer(settings, "dlq-reader", DLQ.name(settings))
    try:
        letters = [e.record for e in _drain(dlq, 3)]
    finally:
        dlq.close()
    assert [(r["offset"], r["reason"]) for r in letters] == [
        (1, "bad_magic"),
        (2, "unknown_fingerprint"),
        (3, "too_short"),
    ]
    for letter, (value, reason) in zip(letters, poison, strict=True):
        assert letter["value"] == value
        assert letter["key"] == b"t1"
        assert (letter["topic"], letter["partition"]) == (heartbeats, 0)
        assert letter["error_type"] == "EventDecodeError"
        assert letter["detail"].startswith(f"{reason}: ")
        assert letter["consumer_group"] == "monitor"
        assert letter["envelope"]["table_id"] == "t1"
        assert letter["envelope"]["producer_id"] == "test-monitor"

    # The group's committed offset is past everything it consumed: a restart reads nothing.
    committed = _committed(settings, "monitor", heartbeats)
    assert committed == len(values)


def test_poison_after_last_event_is_committed_past(
    settings: Settings, topics: list[str], raw_producer: EventProducer
) -> None:
    """A poison message is skipped for good even when no good event follows it."""
    heartbeats = HEARTBEATS.name(settings)
    raw_producer.produce_bytes(heartbeats, b"\xc3\x01short", key=None, partition=0)
    raw_producer.flush()
    consumer = _consumer(settings, "tail", heartbeats)
    try:
        for _ in range(30):
            if consumer.poll(1.0) is None and consumer.dead_lettered:
                break
    finally:
        consumer.close()
    assert consumer.dead_lettered == 1
    assert _committed(settings, "tail", heartbeats) == 1


def _committed(settings: Settings, group: str, topic: str) -> int:
    probe = Consumer(settings.kafka.librdkafka_config(group_id=group))
    try:
        (partition,) = probe.committed([TopicPartition(topic, 0)], timeout=10)
        return int(partition.offset)
    finally:
        probe.close()


def test_undeliverable_dead_letter_stops_and_commits_nothing(
    settings: Settings, topics: list[str], raw_producer: EventProducer
) -> None:
    """If the DLQ cannot take the poison message, the consumer raises instead of skipping it:
    its offset is not committed, so the message is read again, never lost."""
    heartbeats = HEARTBEATS.name(settings)
    good = encode("Heartbeat", sample_events(table_id="t1")["Heartbeat"])
    for value in (good, b"\x00poison-poison"):
        raw_producer.produce_bytes(heartbeats, value, key=b"t1", partition=0)
    raw_producer.flush()
    nowhere = settings.model_copy(
        update={"kafka": settings.kafka.model_copy(update={"bootstrap_servers": "127.0.0.1:1"})}
    )
    broken_dlq = EventProducer(nowhere, producer_id="broken", message_timeout_ms=1000)
    consumer = EventConsumer(
        settings, group_id="stuck", topics=[heartbeats], dlq_producer=broken_dlq
    )
    try:
        first = consumer.poll(30.0)
        assert first is not None and first.offset == 0
        with pytest.raises(EventDeliveryError, match="1 message\\(s\\) failed") as info:
            consumer.poll(30.0)
        assert info.value.failures[0][0] == DLQ.name(nowhere)
        assert consumer.dead_lettered == 0
    finally:
        consumer.close()
        broken_dlq.close(timeout_s=1.0)
    # The good event before it was marked done; the poison message was not skipped.
    assert _committed(settings, "stuck", heartbeats) == 1


def test_assigned_by_hand_at_the_end_reads_only_what_comes_after(
    settings: Settings, topics: list[str], raw_producer: EventProducer
) -> None:
    """The reply readers' pattern (lock client, commit client): partitions from metadata,
    assignment at the high watermark, ``poll_message`` returning at the first message."""
    heartbeats = HEARTBEATS.name(settings)
    beat = encode("Heartbeat", sample_events(table_id="t1")["Heartbeat"])
    for _ in range(2):
        raw_producer.produce_bytes(heartbeats, beat, key=b"t1", partition=0)
    raw_producer.flush()
    consumer = EventConsumer(settings, auto_commit=False, dead_letters=False)
    try:
        assert consumer.partitions(heartbeats, timeout_s=10) == list(range(HEARTBEATS.partitions))
        assert consumer.partitions(f"{heartbeats}.missing", timeout_s=10) == []
        assert consumer.watermarks(heartbeats, 0, timeout_s=10) == (0, 2)
        consumer.assign([TopicPartition(heartbeats, 0, 2)])
        assert consumer.poll_message(0.2) is None
        raw_producer.produce_bytes(heartbeats, beat, key=b"t1", partition=0)
        raw_producer.flush()
        msg = consumer.poll_message(30.0)
        assert msg is not None and msg.offset() == 2
        event = consumer.decode(msg)
        assert event is not None and (event.name, event.offset) == ("Heartbeat", 2)
        assert consumer.positions(heartbeats, [0]) == {0: 3}
    finally:
        consumer.close()


def test_manual_offsets_dead_letter_without_committing(
    settings: Settings, topics: list[str], raw_producer: EventProducer
) -> None:
    """With ``auto_commit=False`` a dead letter is durable before ``decode`` returns, but no
    offset moves until the caller commits (a service that buffers below it decides)."""
    heartbeats = HEARTBEATS.name(settings)
    good = encode("Heartbeat", sample_events(table_id="t1")["Heartbeat"])
    for value in (b"\x00not avro at all", good):
        raw_producer.produce_bytes(heartbeats, value, key=b"t1", partition=0)
    raw_producer.flush()
    rejections: list[str] = []
    consumer = EventConsumer(
        settings,
        group_id="manual",
        consumer_id="test-manual",
        auto_commit=False,
        on_dead_letter=lambda rejection: rejections.append(rejection.reason),
    )
    try:
        consumer.subscribe([heartbeats])
        messages = []
        for _ in range(30):
            messages += consumer.consume(10, 1.0)
            if len(messages) == 2:
                break
        assert [consumer.decode(m) is None for m in messages] == [True, False]
        consumer.dead_letter(messages[1], Rejection("invalid_request", "not for this topic"))
        assert rejections == ["bad_magic", "invalid_request"]
        assert _committed(settings, "manual", heartbeats) < 0  # nothing committed yet
        consumer.commit([TopicPartition(heartbeats, 0, 2)])
    finally:
        consumer.close()
    assert _committed(settings, "manual", heartbeats) == 2

    dlq = _consumer(settings, "manual-dlq", DLQ.name(settings))
    try:
        letters = [e.record for e in _drain(dlq, 2)]
    finally:
        dlq.close()
    assert [(r["offset"], r["reason"], r["error_type"]) for r in letters] == [
        (0, "bad_magic", "EventDecodeError"),
        (1, "invalid_request", "InvalidEvent"),
    ]
    assert {r["consumer_group"] for r in letters} == {"manual"}


def test_an_unreachable_broker_is_a_named_error(settings: Settings) -> None:
    nowhere = settings.model_copy(
        update={"kafka": settings.kafka.model_copy(update={"bootstrap_servers": "127.0.0.1:1"})}
    )
    consumer = EventConsumer(nowhere, auto_commit=False)
    try:
        with pytest.raises(EventConsumerError, match="cannot read"):
            consumer.partitions("anything", timeout_s=1.0)
        with pytest.raises(EventConsumerError, match="cannot read the offsets"):
            consumer.watermarks("anything", 0, timeout_s=1.0)
    finally:
        consumer.close()


def test_timeline_announcer_creates_its_topic_and_delivers(settings: Settings) -> None:
    """A writer whose services never created the timeline topic still announces its entries
    (the topic is made with its own retention, not auto-created with the broker default)."""
    entry = TimelineEntry(
        seq=0,
        instant="20261123120000000",
        action=Action.COMMIT,
        transition=Transition.REQUESTED,
        actor="writer-1",
        lock_token=1,
        wall_time_ms=1_763_900_000_000,
        payload={"operation": "insert"},
    )
    publisher = TimelinePublisher(settings)
    try:
        publisher.publish("t1", entry)
    finally:
        publisher.close()
    assert publisher.failed == 0
    admin = AdminClient(settings.kafka.librdkafka_config())
    [config] = admin.describe_configs([ConfigResource("topic", TIMELINE.name(settings))]).values()
    assert config.result(timeout=10)["retention.ms"].value == "-1"
    consumer = EventConsumer(settings, auto_commit=False, dead_letters=False)
    try:
        timeline = TIMELINE.name(settings)
        ends = [
            consumer.watermarks(timeline, p, timeout_s=10)[1] for p in range(TIMELINE.partitions)
        ]
        assert sum(ends) == 1
    finally:
        consumer.close()
