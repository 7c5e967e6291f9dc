"""Fixtures for the multi-instance lake tests: the session's real broker, a topic prefix per
module, timeline-lock and heartbeat-monitor processes, and ``instances(name)`` starting named
instances of the service under test in one consumer group (tables on the local filesystem).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from _lake_services import BEAT

from lakewarden.events import ensure_topics
from lakewarden.settings import Settings
from lakewarden_services._common.process import ServiceProcess, running_services


@pytest.fixture(scope="module")
def lake_settings(kafka_settings: Settings) -> Settings:
    kafka = kafka_settings.kafka.model_copy(update={"topic_prefix": f"lk{uuid.uuid4().hex[:8]}."})
    settings = kafka_settings.model_copy(update={"kafka": kafka})
    ensure_topics(settings)
    return settings


@pytest.fixture(scope="module")
def coordination(
    lake_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[ServiceProcess]]:
    """timeline-lock (the table lock) and heartbeat-monitor (liveness) for the module."""
    modules = ("lakewarden_services.timeline_lock", "lakewarden_services.heartbeat_monitor")
    with running_services(
        modules, lake_settings, tmp_path_factory.mktemp, extra_env=BEAT
    ) as started:
        yield started
