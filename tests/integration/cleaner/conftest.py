"""Fixtures for the cleaner against the session's real broker (and S3): one topic prefix for
the module, timeline-lock (the table lock), heartbeat-monitor (liveness) and cleaner processes
(they sweep every second)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from lakewarden.events import ensure_topics
from lakewarden.settings import Settings
from lakewarden_services._common.process import ServiceProcess, running_services
from lakewarden_services._common.process import s3_env as env_of_s3

CLEANER = "lakewarden_services.cleaner"
CLEANER_ENV = {"LAKEWARDEN_CLEANER_SWEEP_INTERVAL_S": "1"}
# Deletes run 16 at a time: 2 s each leaves time to kill a cleaner in the middle of them.
SLOW_DELETES = {"LAKEWARDEN_CLEANER_DELETE_DELAY_S": "2"}
HEARTBEAT_ENV = {
    "LAKEWARDEN_HEARTBEAT__INTERVAL_S": "0.2",
    "LAKEWARDEN_HEARTBEAT__TOLERABLE_MISSES": "3",
}


@pytest.fixture(scope="module")
def cl_settings(kafka_settings: Settings, s3_settings: Settings) -> Settings:
    kafka = kafka_settings.kafka.model_copy(update={"topic_prefix": f"cl{uuid.uuid4().hex[:8]}."})
    settings = kafka_settings.model_copy(update={"kafka": kafka, "s3": s3_settings.s3})
    ensure_topics(settings)
    return settings


@pytest.fixture(scope="module")
def s3_env(s3_settings: Settings) -> dict[str, str]:
    return env_of_s3(s3_settings)


@pytest.fixture(scope="module")
def services(
    cl_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[ServiceProcess]]:
    """timeline-lock and heartbeat-monitor for the module."""
    modules = ("lakewarden_services.timeline_lock", "lakewarden_services.heartbeat_monitor")
    with running_services(
        modules, cl_settings, tmp_path_factory.mktemp, extra_env=HEARTBEAT_ENV
    ) as started:
        yield started


@pytest.fixture(scope="module")
def cleaners(
    cl_settings: Settings,
    services: list[ServiceProcess],
    s3_env: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., ServiceProcess]]:
    """``cleaners(name, slow=False)``: the running cleaner instance ``name`` (one consumer
    group); ``slow``: 2 s per delete, so a test can kill it in the middle of a clean (an
    instance whose setting changes is restarted). All are killed at the end of the module."""
    started: dict[str, ServiceProcess] = {}

    def get(name: str, *, slow: bool = False) -> ServiceProcess:
        env = {**CLEANER_ENV, **HEARTBEAT_ENV, **s3_env, **(SLOW_DELETES if slow else {})}
        process = started.get(name)
        if process is None:
            home = tmp_path_factory.mktemp(f"cleaner-{name}")
            process = ServiceProcess(
                CLEANER, cl_settings, home=home, instance_id=name, extra_env=env
            )
            started[name] = process
        elif process.extra_env != env:
            process.kill()
            process.extra_env = env
        process.start()
        return process

    yield get
    for process in started.values():
        process.kill()  # their work is checked; a graceful stop of each costs seconds


@pytest.fixture
def table_root(tmp_path: Path) -> Path:
    return tmp_path
