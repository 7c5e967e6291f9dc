"""What every lakewarden service shares: the health and metrics endpoint, logfmt logging,
dead-lettering of bad events, the process runner, and for each runtime its scaffolding.

A service is a package ``services/<name>/`` with ``app.py`` (its settings, topics, group),
a ``handler`` that decides what to do with one decoded event (tested without Kafka), its
runtime, a ``__main__.py`` that runs it until SIGTERM, and one ``ServiceSpec`` line in
``lakewarden/devstack/services.py``. Two runtimes:

- a plain confluent-kafka loop (``loop.py``; ``loop_service.serve_loop``), its state in
  compacted changelogs read back on assignment (``changelog``, ``registry``);
- a faust app (``app = make_app("<name>", settings)``, ``agents.py`` at module top,
  ``runner.run_service``).
"""

from lakewarden_services._common.app import ServiceSettings, event_topic, make_app
from lakewarden_services._common.dlq import DeadLetters
from lakewarden_services._common.health import HealthServer
from lakewarden_services._common.logs import setup_logging
from lakewarden_services._common.runner import Lifecycle, run_service

__all__ = [
    "DeadLetters",
    "HealthServer",
    "Lifecycle",
    "ServiceSettings",
    "event_topic",
    "make_app",
    "run_service",
    "setup_logging",
]
