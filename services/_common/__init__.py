"""What every lakewarden service shares: a faust app made from ``Settings``, the health and
metrics endpoint, logfmt logging, dead-lettering of bad events, and the process runner.

A service is a package ``services/<name>/`` with::

    app.py       app = make_app("<name>", settings); topics, tables declared at module top
    agents.py    agents (concurrency 1, idempotent handlers) and timers, at module top
    __main__.py  run_service(app, ...) : python -m services.<name>

and one ``ServiceSpec`` line in ``lakewarden/devstack/services.py``.
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
