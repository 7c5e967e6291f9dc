"""SASL/PLAIN against a real broker (issue 17, security): the ``LAKEWARDEN_KAFKA__*`` settings
reach the clients, an event goes through a SASL_PLAINTEXT listener and back, and a wrong
password fails with ``KafkaAuthenticationError``, one line that does not show the password,
in every client and in a service's start-up.

The broker is this module's own (``KafkaBroker(sasl_port=..., sasl_users=...)``: a second,
SASL_PLAINTEXT listener on loopback beside the PLAINTEXT one); no TLS, as it is loopback only.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from lakewarden.cli.ingest import check_broker
from lakewarden.devstack import KafkaBroker, processes
from lakewarden.devstack.errors import DevStackError
from lakewarden.errors import LakewardenError
from lakewarden.events import EventConsumer, EventProducer
from lakewarden.events.kafka_errors import KafkaAuthenticationError
from lakewarden.events.topics import HEARTBEATS, ensure_topics
from lakewarden.settings import KafkaSettings, Settings
from lakewarden.testing.kafka import heartbeat_event, round_trip_beat
from lakewarden_services._common.process import ServiceProcess

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


def test_events_go_through_the_sasl_listener(sasl_broker: KafkaBroker) -> None:
    settings = _settings(sasl_broker, PASSWORD, f"sasl{uuid.uuid4().hex[:6]}.")
    ensure_topics(settings, specs=[HEARTBEATS])  # the admin client authenticates too
    round_trip_beat(settings, 1, producer_id="sasl-test", timeout_s=60)


def assert_one_clear_line(err: BaseException, wrong: str) -> None:
    text = str(err)
    assert isinstance(err, KafkaAuthenticationError), f"{type(err).__name__}: {text}"
    assert "\n" not in text
    assert wrong not in text and PASSWORD not in text
    assert "refused to authenticate user 'lakewarden'" in text
    assert "Invalid username or password" in text  # the broker's reason
    assert "is the broker up" not in text
    assert "LAKEWARDEN_KAFKA__SASL_PASSWORD" in text  # what to check


def test_a_wrong_sasl_password_is_an_authentication_error(sasl_broker: KafkaBroker) -> None:
    """Issue 17 (reliab 2): it used to read "Cannot list topics: ... Broker transport failure.
    Help: is the broker up?". Every client path says what it is: the admin client (every
    service's start-up, ``ensure_topics``), the CLI's broker check, a producer's flush and a
    consumer's poll."""
    wrong = "wrong-SENTINEL-0b5d"
    settings = _settings(sasl_broker, wrong, "saslbad.")
    with pytest.raises(LakewardenError) as info:
        ensure_topics(settings, specs=[HEARTBEATS])
    assert_one_clear_line(info.value, wrong)
    with pytest.raises(LakewardenError) as info:
        check_broker(settings, sasl_broker.sasl_bootstrap)
    assert_one_clear_line(info.value, wrong)
    with EventProducer(settings, producer_id="sasl-test") as producer:
        producer.send("Heartbeat", heartbeat_event(1), topic=HEARTBEATS)
        with pytest.raises(LakewardenError) as info:
            producer.flush(5)
        assert_one_clear_line(info.value, wrong)
        with pytest.raises(KafkaAuthenticationError):
            producer.close(1)  # nothing was delivered: closing says why too
    consumer = EventConsumer(settings, group_id="g", topics=[HEARTBEATS], dead_letters=False)
    try:
        with pytest.raises(LakewardenError) as info:
            for _ in range(30):
                consumer.poll(1.0)
        assert_one_clear_line(info.value, wrong)
    finally:
        consumer.close()


def test_a_service_with_a_wrong_sasl_password_says_so_and_exits(
    sasl_broker: KafkaBroker, tmp_path: Path
) -> None:
    wrong = "wrong-SENTINEL-77aa"
    settings = _settings(sasl_broker, wrong, "saslsvc.")
    env = {
        "LAKEWARDEN_KAFKA__SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "LAKEWARDEN_KAFKA__SASL_MECHANISM": "PLAIN",
        "LAKEWARDEN_KAFKA__SASL_USERNAME": USER,
        "LAKEWARDEN_KAFKA__SASL_PASSWORD": wrong,
        "LAKEWARDEN_KAFKA__REQUEST_TIMEOUT_S": "5",
    }
    service = ServiceProcess(
        "lakewarden_services.timeline_lock", settings, home=tmp_path, extra_env=env
    )
    with pytest.raises(DevStackError, match="exited during start-up"):
        service.start(timeout_s=60)
    service.stop()
    text = service.log_text()
    (line,) = [ln for ln in text.splitlines() if "cannot start" in ln]
    assert "refused to authenticate user 'lakewarden'" in line
    assert wrong not in text and "is the broker up" not in text


def test_sasl_users_must_fit_the_jaas_line(tmp_path: object) -> None:
    with pytest.raises(DevStackError, match="SASL user"):
        KafkaBroker(home=tmp_path, sasl_port=1, sasl_users=(("a b", "x"),))  # type: ignore[arg-type]
