"""SASL/PLAIN against a real broker (issue 17, security): the ``LAKEWARDEN_KAFKA__*`` settings
reach the clients, an event goes through a SASL_PLAINTEXT listener and back, and a wrong
password fails with an error that does not show the password.

The broker is this module's own (``KafkaBroker(sasl_port=..., sasl_users=...)``: a second,
SASL_PLAINTEXT listener on loopback beside the PLAINTEXT one); no TLS, as it is loopback only.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from lakewarden.devstack import KafkaBroker, processes
from lakewarden.devstack.errors import DevStackError
from lakewarden.errors import LakewardenError
from lakewarden.events import EventConsumer, EventProducer, make_event
from lakewarden.events.topics import HEARTBEATS, ensure_topics
from lakewarden.settings import KafkaSettings, Settings

USER = "lakewarden"
PASSWORD = "sasl-pass-SENTINEL-7c1e90aa"


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(
        home=tmp_path_factory.mktemp("kafka-sasl"),
        port=processes.free_port(),
        controller_port=processes.free_port(),
        sasl_port=processes.free_port(),
        sasl_users=((USER, PASSWORD),),
    )
    broker.check_jars()
    broker.start(timeout_s=180)
    try:
        yield broker
    finally:
        broker.stop()


def _settings(broker: KafkaBroker, password: str, prefix: str) -> Settings:
    return Settings(
        kafka=KafkaSettings(
            bootstrap_servers=broker.sasl_bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_username=USER,
            sasl_password=SecretStr(password),
            topic_prefix=prefix,
            request_timeout_s=5,
        )
    )


def _beat(n: int) -> dict[str, object]:
    return make_event(
        "Heartbeat",
        table_id="t",
        producer_id="sasl-test",
        instant="20260101000000000",
        owner="me",
        interval_ms=1000,
        seq=n,
        kind="beat",
        tolerable_misses=3,
    )


def test_events_go_through_the_sasl_listener(sasl_broker: KafkaBroker) -> None:
    settings = _settings(sasl_broker, PASSWORD, f"sasl{uuid.uuid4().hex[:6]}.")
    ensure_topics(settings, specs=[HEARTBEATS])  # the admin client authenticates too
    producer = EventProducer(settings, producer_id="sasl-test")
    producer.send("Heartbeat", _beat(1), topic=HEARTBEATS)
    producer.flush(30)
    consumer = EventConsumer(
        settings,
        group_id=f"g{uuid.uuid4().hex[:6]}",
        consumer_id="t",
        dead_letters=False,
        auto_offset_reset="earliest",
    )
    try:
        consumer.subscribe([HEARTBEATS.name(settings)])
        got = None
        for _ in range(60):
            got = consumer.poll(1.0)
            if got is not None:
                break
        assert got is not None and got.name == "Heartbeat" and got.record["seq"] == 1
    finally:
        consumer.close()


def test_a_wrong_password_fails_without_showing_it(sasl_broker: KafkaBroker) -> None:
    wrong = "wrong-SENTINEL-0b5d"
    settings = _settings(sasl_broker, wrong, "saslbad.")
    with pytest.raises(LakewardenError) as info:
        ensure_topics(settings, specs=[HEARTBEATS])
    assert wrong not in str(info.value) and PASSWORD not in str(info.value)
    # Known weakness (reported): librdkafka reports the failed authentication as a transport
    # failure, so the message says "Cannot list topics ... is the broker up?", not "wrong
    # credentials"; the password is in it nowhere.
    assert "Cannot list topics" in str(info.value)


def test_sasl_users_must_fit_the_jaas_line(tmp_path: object) -> None:
    with pytest.raises(DevStackError, match="SASL user"):
        KafkaBroker(home=tmp_path, sasl_port=1, sasl_users=(("a b", "x"),))  # type: ignore[arg-type]
