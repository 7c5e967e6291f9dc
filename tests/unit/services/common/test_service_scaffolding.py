"""The shared service scaffolding: the health/metrics endpoint, the service settings and
group, logfmt logging and dead letters (no broker needed)."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter

from lakewarden.events import Event, EventDecodeError, Undecodable
from lakewarden.settings import KafkaSettings, Settings
from lakewarden_services._common.dlq import DeadLetters
from lakewarden_services._common.health import HealthServer
from lakewarden_services._common.logs import setup_logging
from lakewarden_services._common.loop_service import Consumed
from lakewarden_services._common.settings import ServiceSettings, service_group


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


def test_a_service_group_is_named_under_the_topic_prefix() -> None:
    settings = Settings(kafka=KafkaSettings(topic_prefix="x."))
    assert service_group("svc", settings) == "x.svc"  # the faust app id the services had
    assert ServiceSettings(instance_id="7").group_instance_id("svc") == "svc-7"
    assert ServiceSettings(instance_id=None).group_instance_id("svc") is None


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
        logging.getLogger("confluent_kafka.consumer").info("started", extra={"pid": 42})
        err = capsys.readouterr().err
        assert "logger=confluent_kafka.consumer msg=started" in err
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
    message = Consumed("src", 3, 17, b"tbl", b"\x00bad", 0.0)
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
