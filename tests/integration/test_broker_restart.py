"""The plain-loop services after ``kill -9`` of the broker and a restart on the same ports
(issue 17, reliab 3: the campaign's ``service_unhealthy``). Each service's ``/health`` must be
OK again within a bound, and say why while it is not; timeline-lock must grant a lease and a
beat must go through afterwards. A stuck service fails the bound; a slow one shows its
reason and how long it has not been OK.

The broker is this module's own (killing the session's broker would break other tests).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakewarden.clients import LockClient
from lakewarden.devstack import KafkaBroker, processes
from lakewarden.settings import KafkaSettings, Settings
from lakewarden.testing.kafka import round_trip_beat
from lakewarden_services._common.process import ServiceProcess

SERVICES = (
    "lakewarden_services.timeline_lock",
    "lakewarden_services.heartbeat_monitor",
    "lakewarden_services.error_sink",
)
RECOVERY_BOUND_S = 120.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(
        home=tmp_path_factory.mktemp("kafka-restart"),
        port=processes.free_port(),
        controller_port=processes.free_port(),
    )
    broker.check_jars()
    broker.start(timeout_s=180)
    try:
        yield broker
    finally:
        broker.stop()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_services_are_healthy_again_after_a_broker_restart(
    broker: KafkaBroker, tmp_path: Path
) -> None:
    settings = Settings(kafka=KafkaSettings(bootstrap_servers=broker.bootstrap, topic_prefix="br."))
    env = {"LAKEWARDEN_HEARTBEAT__INTERVAL_S": "0.5", "LAKEWARDEN_HEARTBEAT__TOLERABLE_MISSES": "4"}
    services = [
        ServiceProcess(module, settings, home=tmp_path / module, extra_env=env)
        for module in SERVICES
    ]
    try:
        for service in services:
            service.home.mkdir()
            service.start(timeout_s=180)
        pid = broker.running_pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        processes.wait_for(lambda: not processes.pid_alive(pid), timeout_s=30)
        broker.start(timeout_s=180)  # same ports, same data
        back = time.monotonic()
        reasons: dict[str, set[str]] = {s.name: set() for s in services}
        pending = list(services)
        while pending and time.monotonic() - back < RECOVERY_BOUND_S:
            for service in list(pending):
                status, body = service.get("/health")
                if status == 200:
                    pending.remove(service)
                    continue
                details = json.loads(body)
                assert details["status"] in ("rebalancing", "starting"), body
                if service.name != "error_sink":
                    reasons[service.name].add(details["reason"])
                    assert details["not_ok_s"] >= 0
            time.sleep(0.2)
        assert pending == [], (
            f"{[s.name for s in pending]} not healthy {RECOVERY_BOUND_S:g} s after the broker "
            f"came back (reasons seen: {reasons})"
        )
        with LockClient(settings, owner="after-restart") as client:
            with client.hold("t-restart", ttl_s=30.0, wait_s=60.0) as lease:
                assert lease.token > 0
        round_trip_beat(settings, 7, producer_id="after-restart", timeout_s=60)
    finally:
        for service in services:
            service.stop()
