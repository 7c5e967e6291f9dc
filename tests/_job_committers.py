"""job-committer processes for tests that write tables with Kafka configured.

``Table.write`` hands its job commit to job-committer whenever Kafka is configured (the default,
``kafka.job_commits == "service"``), so a test module that writes through a Kafka coordinator
needs one running for its topic prefix. ``JobCommitters.ensure(settings)`` starts one the first
time a prefix is asked for and reuses it afterwards; the module-scoped ``job_committer`` fixture
of ``tests/conftest.py`` stops them all at the end of the module (one start per module and
prefix: a few seconds each).
"""

from __future__ import annotations

from pathlib import Path

from lakewarden.events import ensure_topics
from lakewarden.settings import Settings
from lakewarden_services._common.process import ServiceProcess

MODULE = "lakewarden_services.job_committer"


class JobCommitters:
    """One job-committer per (bootstrap servers, topic prefix), started on demand."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._running: dict[tuple[str, str], ServiceProcess] = {}

    def ensure(self, settings: Settings) -> ServiceProcess:
        """The job-committer serving ``settings``' topics, started (and ready) if none runs.

        Raises: DevStackError: it did not become ready (with its log)."""
        key = (settings.kafka.bootstrap_servers or "", settings.kafka.topic_prefix)
        service = self._running.get(key)
        if service is None:
            ensure_topics(settings)
            home = self.home / f"job-committer-{len(self._running)}"
            home.mkdir(parents=True, exist_ok=True)
            service = ServiceProcess(MODULE, settings, home=home)
            self._running[key] = service
        service.start()  # a no-op while it runs; a restart after a test killed it
        return service

    def stop_all(self) -> None:
        """Stop every process started here (by pid)."""
        running, self._running = list(self._running.values()), {}
        for service in running:
            service.stop()


__all__ = ["JobCommitters"]
