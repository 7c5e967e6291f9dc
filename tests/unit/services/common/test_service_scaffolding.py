"""The shared service scaffolding: the faust app factory, health/metrics endpoint, readiness,
logfmt logging and dead letters (no broker needed)."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request
from typing import Any

import pytest
from faust.types import Message
from prometheus_client import CollectorRegistry, Counter

from lakewarden.events import Event, EventDecodeError, Undecodable
from lakewarden.settings import KafkaSettings, Settings
from lakewarden_services._common.app import ServiceSettings, app_id, broker_urls, make_app
from lakewarden_services._common.dlq import DeadLetters
from lakewarden_services._common.health import HealthServer
from lakewarden_services._common.logs import setup_logging
from lakewarden_services._common.runner import Lifecycle


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as err:
        return int(err.code), err.read().decode()


def test_health_server_serves_health_metrics_and_404_on_loopback_only() -> None:
    registry = CollectorRegistry()
    Counter("lw_test_things", "things", registry=registry).inc(3)
    state = {"ok": False}
    server = HealthServer(0, lambda: (state["ok"], {"status": "starting"}), registry=registry)
    server.start()
    try:
        assert server._server is not None and server._server.server_address[0] == "127.0.0.1"  # noqa: SLF001
        status, body = _get(server.port, "/health")
        assert status == 503 and json.loads(body) == {"status": "starting"}
        state["ok"] = True
        assert _get(server.port, "/health")[0] == 200
        status, text = _get(server.port, "/metrics")
        assert status == 200 and "lw_test_things_total 3.0" in text
        assert _get(server.port, "/other")[0] == 404
    finally:
        server.stop()
    server.stop()  # idempotent


def test_make_app_applies_the_shared_choices() -> None:
    settings = Settings(
        kafka=KafkaSettings(bootstrap_servers="127.0.0.1:1234,127.0.0.1:1235", topic_prefix="x.")
    )
    app = make_app("svc", settings, partitions=6, instance_id="7", commit_interval_s=2.5)
    assert app.conf.id == app_id("svc", settings) == "x.svc"
    assert [str(url) for url in app.conf.broker] == [
        "kafka://127.0.0.1:1234",
        "kafka://127.0.0.1:1235",
    ]
    assert app.conf.web_enabled is False
    assert app.conf.topic_partitions == 6 and app.conf.table_standby_replicas == 0
    assert app.conf.broker_commit_interval == 2.5
    assert app.conf.consumer_group_instance_id == "svc-7"
    assert app.conf.producer_acks == -1


def test_broker_urls_without_kafka_are_a_placeholder_that_never_connects() -> None:
    assert broker_urls(Settings(kafka=KafkaSettings(bootstrap_servers=None))) == [
        "kafka://127.0.0.1:9"
    ]


def test_service_settings_come_from_the_dev_stack_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LAKEWARDEN_HEALTH_PORT", "8123")
    monkeypatch.setenv("LAKEWARDEN_INSTANCE_ID", "a")
    env = ServiceSettings()
    assert env.health_port == 8123 and env.instance_id == "a" and env.commit_interval_s == 1.0


def test_setup_logging_writes_logfmt_with_the_service_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        setup_logging("svc-x", "INFO")
        logging.getLogger("faust.worker").info("started", extra={"pid": 42})
        err = capsys.readouterr().err
        assert "logger=faust.worker msg=started" in err
        assert "pid=42" in err and "service=svc-x" in err and "level=info" in err
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


class _Topic:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes | None, Any]] = []

    async def send(self, *, key: bytes | None, value: Any) -> None:
        self.sent.append((key, value))


def test_dead_letters_keep_the_bytes_the_reason_and_where_they_came_from() -> None:
    topic = _Topic()
    letters = DeadLetters(topic, service="svc", consumer_group="grp")  # type: ignore[arg-type]
    message = Message("src", 3, 17, 0.0, 0, None, b"tbl", b"\x00bad", None)
    error = EventDecodeError("too_short", "4 bytes")
    asyncio.run(letters.undecodable(message, Undecodable(error, b"\x00bad")))
    asyncio.run(letters.reject(message, reason="invalid_request", detail="no owner"))
    [(key1, first), (key2, second)] = topic.sent
    assert key1 == key2 == b"tbl"
    assert isinstance(first, Event) and first.name == "DeadLetter"
    assert first.record["reason"] == "too_short" and first.record["value"] == b"\x00bad"
    assert (first.record["topic"], first.record["partition"], first.record["offset"]) == (
        "src",
        3,
        17,
    )
    assert second.record["reason"] == "invalid_request"
    assert second.record["detail"] == "no owner" and second.record["consumer_group"] == "grp"
    assert second.record["envelope"]["table_id"] == "tbl"


def test_lifecycle_is_ready_after_the_first_completed_rebalance() -> None:
    app = make_app("svc", Settings(), partitions=6)
    lifecycle = Lifecycle(app, "svc")
    started: list[int] = []
    lifecycle.on_first_ready(lambda: started.append(1))
    assert lifecycle.probe() == (False, lifecycle.probe()[1])
    assert lifecycle.probe()[1]["status"] == "starting"
    before = lifecycle.assigned_at_ms
    lifecycle._assigned(app, set(), signal=None)  # type: ignore[arg-type]  # noqa: SLF001
    assert lifecycle.assigned_at_ms >= before and not lifecycle.probe()[0]
    lifecycle._complete(app, signal=None)  # type: ignore[arg-type]  # noqa: SLF001
    assert lifecycle.probe()[0] and started == [1]
    lifecycle._revoked(app, set(), signal=None)  # type: ignore[arg-type]  # noqa: SLF001
    assert lifecycle.probe()[1]["status"] == "rebalancing"
    lifecycle._complete(app, signal=None)  # type: ignore[arg-type]  # noqa: SLF001
    assert lifecycle.probe()[0] and started == [1]  # the ready callbacks run once
