"""Fixtures for timeline-lock against the session's real broker and the real service process.

Each fixture that starts a service gives it a topic prefix of its own, so tests never see each
other's requests, replies, consumer groups or changelogs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakewarden.clients import LockClient
from lakewarden.settings import Settings
from lakewarden_services._common.process import ServiceProcess

MODULE = "lakewarden_services.timeline_lock"


def isolated(settings: Settings) -> Settings:
    """``settings`` with a fresh topic prefix."""
    kafka = settings.kafka.model_copy(update={"topic_prefix": f"lw{uuid.uuid4().hex[:8]}."})
    return settings.model_copy(update={"kafka": kafka})


@pytest.fixture(scope="module")
def shared_lock_settings(kafka_settings: Settings) -> Settings:
    return isolated(kafka_settings)


@pytest.fixture(scope="module")
def shared_lock_service(
    shared_lock_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    """One timeline-lock process for a whole test module (tests that do not kill it)."""
    with ServiceProcess(
        MODULE, shared_lock_settings, home=tmp_path_factory.mktemp("timeline-lock")
    ) as service:
        yield service


@pytest.fixture
def lock_settings(kafka_settings: Settings) -> Settings:
    return isolated(kafka_settings)


@pytest.fixture
def lock_service(lock_settings: Settings, tmp_path: Path) -> Iterator[ServiceProcess]:
    """A timeline-lock process of this test's own (for tests that kill or restart it)."""
    service = ServiceProcess(MODULE, lock_settings, home=tmp_path)
    service.start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def make_client(request: pytest.FixtureRequest) -> Iterator[type[LockClient]]:
    """``make_client(settings, ...)``: a LockClient closed at the end of the test."""
    clients: list[LockClient] = []

    class Client(LockClient):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            clients.append(self)

    yield Client
    for client in clients:
        client.close()
