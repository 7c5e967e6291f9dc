"""Topic declarations and the producer/consumer wrappers' behaviour without a broker."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from lakewarden.errors import ConfigurationError, RetryableError
from lakewarden.events import (
    DLQ,
    TOPICS,
    EventConsumer,
    EventConsumerError,
    EventDeliveryError,
    EventEncodeError,
    EventProducer,
    ensure_topics,
    sample_events,
    topic_for_event,
)
from lakewarden.events.topics import FOREVER, TIMELINE
from lakewarden.settings import KafkaSettings, Settings

NO_KAFKA = Settings(kafka=KafkaSettings(bootstrap_servers=None))
# Port 1 on loopback: nothing listens, connections are refused at once.
UNREACHABLE = Settings(kafka=KafkaSettings(bootstrap_servers="127.0.0.1:1"))


def test_every_topic_is_declared_once_with_the_prefix() -> None:
    names = [spec.name(Settings()) for spec in TOPICS]
    assert len(set(names)) == len(names) == 13
    assert all(name.startswith("lakewarden.") for name in names)
    assert {spec.suffix for spec in TOPICS} == {
        "lock.requests",
        "lock.replies",
        "heartbeats",
        "heartbeat.expired",
        "timeline",
        "task.manifests",
        "job.requests",
        "job.results",
        "errors",
        "cancel.requests",
        "cancel.results",
        "clean.requests",
        "dlq",
    }


def test_timeline_is_kept_forever_and_others_expire() -> None:
    assert TIMELINE.retention_ms == FOREVER == -1
    assert TIMELINE.config() == {"retention.ms": "-1", "cleanup.policy": "delete"}
    assert all(spec.retention_ms > 0 for spec in TOPICS if spec is not TIMELINE)


def test_prefix_comes_from_settings() -> None:
    settings = Settings(kafka=KafkaSettings(topic_prefix="staging.lw."))
    assert DLQ.name(settings) == "staging.lw.dlq"


def test_unknown_event_has_no_topic() -> None:
    with pytest.raises(ConfigurationError, match="No topic carries event 'Nope'"):
        topic_for_event("Nope")


def test_ensure_topics_without_broker_is_retryable() -> None:
    with pytest.raises(RetryableError, match="Cannot list topics.*Help: is the broker up"):
        ensure_topics(UNREACHABLE, timeout_s=1.0)


def test_producer_does_no_io_until_first_send() -> None:
    producer = EventProducer(NO_KAFKA, producer_id="p")
    producer.flush()  # nothing sent, nothing to do, no client created
    with pytest.raises(ConfigurationError, match="Kafka is not configured"):
        producer.send("Heartbeat", sample_events()["Heartbeat"])


def test_producer_rejects_bad_records_before_kafka() -> None:
    producer = EventProducer(NO_KAFKA, producer_id="p")
    with pytest.raises(EventEncodeError, match="cannot encode Heartbeat"):
        producer.send("Heartbeat", {**sample_events()["Heartbeat"], "seq": None})


def test_undelivered_messages_fail_the_flush() -> None:
    producer = EventProducer(UNREACHABLE, producer_id="p", message_timeout_ms=300)
    producer.send("Heartbeat", sample_events()["Heartbeat"])
    with pytest.raises(EventDeliveryError, match="1 message\\(s\\) failed") as info:
        producer.flush(timeout_s=5.0)
    assert [topic for topic, _ in info.value.failures] == ["lakewarden.heartbeats"]
    assert isinstance(info.value, RetryableError)
    assert producer.delivered == 0
    producer.flush()  # failures are reported once


def test_connecting_a_producer_to_an_unreachable_broker_is_retryable() -> None:
    producer = EventProducer(UNREACHABLE, producer_id="p")
    with pytest.raises(RetryableError, match="Cannot reach the broker for lakewarden.timeline"):
        producer.connect(TIMELINE, timeout_s=0.5)


def test_consumer_does_no_io_until_first_poll() -> None:
    consumer = EventConsumer(NO_KAFKA, group_id="g", topics=TOPICS)
    assert consumer.topics[0] == "lakewarden.lock.requests"
    consumer.commit()
    consumer.close()
    with pytest.raises(ConfigurationError, match="Kafka is not configured"):
        consumer.poll(0.1)


@pytest.mark.parametrize("code", [KafkaError._FATAL, KafkaError._TRANSPORT])
def test_a_fatal_error_code_fails_the_consumer_even_without_the_fatal_flag(code: int) -> None:
    """librdkafka reports e.g. a fenced static member to the error callback as code _FATAL
    with ``fatal()`` false; taking it for a transient error left the services polling a dead
    consumer forever. A transient one (_TRANSPORT) is still only logged."""
    consumer = EventConsumer(UNREACHABLE, group_id="g", topics=TOPICS)
    try:
        error = KafkaError(code, "fenced", fatal=False)
        if code == KafkaError._FATAL:
            with pytest.raises(EventConsumerError, match="fenced"):
                consumer._on_error(error)
        else:
            consumer._on_error(error)
    finally:
        consumer.close()
