"""Fixtures for heartbeat-monitor against the session's real broker and the real service.

Every test gets a topic prefix of its own (fresh heartbeats, expiries, changelog, group).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hbtools import MODULE, Expiries, Writer, isolated

from lakewarden.events import ensure_topics
from lakewarden.events.topics import HEARTBEAT_EXPIRED, HEARTBEATS, TIMELINE
from lakewarden.settings import Settings
from lakewarden_services._common.process import ServiceProcess


@pytest.fixture
def hb_settings(kafka_settings: Settings) -> Settings:
    settings = isolated(kafka_settings)
    ensure_topics(settings, specs=[HEARTBEATS, HEARTBEAT_EXPIRED, TIMELINE])
    return settings


@pytest.fixture
def monitor(hb_settings: Settings, tmp_path: Path) -> Iterator[ServiceProcess]:
    service = ServiceProcess(MODULE, hb_settings, home=tmp_path / "monitor")
    service.home.mkdir()
    service.start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def expiries(hb_settings: Settings) -> Iterator[Expiries]:
    watcher = Expiries(hb_settings)
    yield watcher
    watcher.close()


@pytest.fixture
def writers(hb_settings: Settings) -> Iterator[list[Writer]]:
    """Start writers with ``spawn(*args)``; all are killed at the end."""
    started: list[Writer] = []
    yield started
    for writer in started:
        writer.close()
