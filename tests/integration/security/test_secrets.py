"""Secrets never leak (issue 17, security): S3 keys and the Kafka SASL password, set through
``LAKEWARDEN_*`` settings, appear in no repr, log line, ``/health``, ``/metrics`` or error
message. The values are distinctive sentinels, so a grep finds any copy of them.

One real service process (heartbeat-monitor, a plain confluent-kafka loop, at DEBUG log level)
runs with the secrets in its environment for the module; PLAINTEXT keeps the session broker
usable, while the password is still handed to every client (``security_config``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from lakewarden.cli import cli
from lakewarden.events import ensure_topics
from lakewarden.events.topics import HEARTBEAT_EXPIRED, HEARTBEATS, TIMELINE
from lakewarden.settings import Settings
from lakewarden_services._common.process import ServiceProcess

S3_KEY_ID = "AKIASENTINEL7Q2Z9XKEY"
S3_SECRET = "s3-secret-SENTINEL-9f3b1c7e"
SASL_PASSWORD = "sasl-pass-SENTINEL-4d8a2e61"
SECRETS = (S3_KEY_ID, S3_SECRET, SASL_PASSWORD)
SECRET_ENV = {
    "LAKEWARDEN_S3__ACCESS_KEY_ID": S3_KEY_ID,
    "LAKEWARDEN_S3__SECRET_ACCESS_KEY": S3_SECRET,
    "LAKEWARDEN_KAFKA__SASL_USERNAME": "lakewarden",
    "LAKEWARDEN_KAFKA__SASL_PASSWORD": SASL_PASSWORD,
    "LAKEWARDEN_KAFKA__SASL_MECHANISM": "PLAIN",
}


def assert_no_secret(text: str, where: str) -> None:
    leaked = [secret for secret in SECRETS if secret in text]
    assert leaked == [], f"{where} shows {leaked}"


@pytest.fixture(scope="module")
def monitor(
    kafka_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    kafka = kafka_settings.kafka.model_copy(update={"topic_prefix": f"sec{uuid.uuid4().hex[:8]}."})
    settings = kafka_settings.model_copy(update={"kafka": kafka})
    ensure_topics(settings, specs=[HEARTBEATS, HEARTBEAT_EXPIRED, TIMELINE])
    home = tmp_path_factory.mktemp("secrets")
    service = ServiceProcess(
        "lakewarden_services.heartbeat_monitor",
        settings,
        home=home,
        log_level="DEBUG",
        extra_env=SECRET_ENV,
    )
    service.start()
    try:
        yield service
    finally:
        service.stop()


def test_settings_never_show_their_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SECRET_ENV.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    for text in (
        repr(settings),
        str(settings),
        settings.model_dump_json(),
        str(settings.model_dump()),
    ):
        assert_no_secret(text, "the settings")
    # the clients do get them (otherwise this test could not fail for the right reason)
    monkeypatch.setenv("LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    assert Settings().kafka.librdkafka_config()["sasl.password"] == SASL_PASSWORD


def test_service_health_metrics_and_logs_show_no_secret(monitor: ServiceProcess) -> None:
    status, health = monitor.get("/health")
    assert status == 200
    assert_no_secret(health, "/health")
    status, metrics = monitor.get("/metrics")
    assert status == 200 and "# TYPE" in metrics
    assert_no_secret(metrics, "/metrics")
    log = monitor.log_text()
    assert "health endpoint listening" in log  # the grep reads the real log
    assert_no_secret(log, "the service log")


def test_cli_errors_show_no_secret(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in SECRET_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LAKEWARDEN_KAFKA__REQUEST_TIMEOUT_S", "1")
    monkeypatch.setenv("LAKEWARDEN_S3__ENDPOINT_URL", "http://127.0.0.1:1")
    runs = [
        ["--log-level", "DEBUG", "ingest", "--topic", "t", "--table", "/not/a/table"],
        ["--log-level", "DEBUG", "errors", "show", "s3://bucket/orders"],
        ["--log-level", "DEBUG", "timeline", "repair", "s3://bucket/orders"],
    ]
    monkeypatch.setenv("LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
    for argv in runs:
        result = CliRunner().invoke(cli, argv)
        assert result.exit_code != 0, argv
        assert_no_secret(result.output + result.stderr, " ".join(argv))
