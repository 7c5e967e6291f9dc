"""Fixtures for job-committer against the session's real broker, real service processes
(timeline-lock for the table lease, job-committer) and tables on the local filesystem.

Each module gets a topic prefix of its own; tests that kill the committer start their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _jc_helpers import LOCK_MODULE, MODULE, isolated

from lakewarden.clients import CommitClient
from lakewarden.events import ensure_topics
from lakewarden.settings import Settings
from lakewarden_services._common.process import ServiceProcess, s3_env


@pytest.fixture(scope="module")
def jc_settings(kafka_settings: Settings) -> Settings:
    settings = isolated(kafka_settings)
    ensure_topics(settings)
    return settings


@pytest.fixture(scope="module")
def lock_service(
    jc_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    with ServiceProcess(
        LOCK_MODULE, jc_settings, home=tmp_path_factory.mktemp("timeline-lock")
    ) as service:
        yield service


@pytest.fixture(scope="module")
def committer_service(
    jc_settings: Settings, lock_service: ServiceProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    """One job-committer for a whole module (tests that do not kill it)."""
    with ServiceProcess(
        MODULE, jc_settings, home=tmp_path_factory.mktemp("job-committer")
    ) as service:
        yield service


@pytest.fixture
def client(jc_settings: Settings) -> Iterator[CommitClient]:
    commit_client = CommitClient(jc_settings)
    yield commit_client
    commit_client.close()


@pytest.fixture
def table_uri(tmp_path: Path) -> str:
    return str(tmp_path / "orders")


@pytest.fixture(scope="module")
def both(jc_settings: Settings, s3_settings: Settings) -> Settings:
    """The module's Kafka settings with the session's SeaweedFS."""
    return jc_settings.model_copy(update={"s3": s3_settings.s3})


@pytest.fixture(scope="module")
def s3_committer(both: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A job-committer process that reaches the session's SeaweedFS."""
    home = tmp_path_factory.mktemp("job-committer-s3")
    with ServiceProcess(MODULE, both, home=home, extra_env=s3_env(both)):
        yield
