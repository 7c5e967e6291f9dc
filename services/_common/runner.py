"""Running a service process: logging, topics, the faust worker, and health once ready.

``python -m services.<name>`` calls :func:`run_service`, which meets the dev stack's contract
(``lakewarden/devstack/services.py``):

1. logfmt logging on stderr (the stack appends it to the service's log file);
2. the service's topics (and the DLQ) exist, created idempotently;
3. the faust worker runs; SIGTERM and SIGINT stop it gracefully (faust commits what it
   processed and leaves the group);
4. once the first partition assignment and table recovery completed, the health endpoint
   listens on ``127.0.0.1:$LAKEWARDEN_HEALTH_PORT`` (the stack's readiness signal).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn, cast

import faust
from mode import BaseSignalT

from lakewarden.errors import LakewardenError
from lakewarden.events.topics import DLQ, TopicSpec, ensure_topics
from lakewarden.settings import Settings
from lakewarden_services._common.app import ServiceSettings
from lakewarden_services._common.health import HealthServer
from lakewarden_services._common.logs import setup_logging

log = logging.getLogger(__name__)


class Lifecycle:
    """Readiness of a service app, from faust's rebalance signals.

    Create it at module top, next to the app (the signals must be connected before the worker
    starts). ``assigned_at_ms`` is when this process last received a partition assignment:
    services that judge time-based state they recovered from a changelog (lease expiry) count
    from there, because nobody served those partitions while they moved.
    """

    def __init__(self, app: faust.App, service: str) -> None:
        self.service = service
        self.started_ms = _now_ms()
        self.assigned_at_ms = self.started_ms
        self.ready = False
        self.rebalancing = False
        self.rebalances = 0
        self._on_ready: list[Callable[[], None]] = []
        # mode's receiver type does not accept bound methods under mypy; the signature is right.
        app.on_partitions_revoked.connect(cast(Any, self._revoked))
        app.on_partitions_assigned.connect(cast(Any, self._assigned))
        app.on_rebalance_complete.connect(cast(Any, self._complete))

    def on_first_ready(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the event loop) when the service first becomes ready."""
        self._on_ready.append(callback)

    def probe(self) -> tuple[bool, dict[str, Any]]:
        """``(healthy, details)`` for the health endpoint."""
        status = "ok" if self.ready and not self.rebalancing else "starting"
        if self.ready and self.rebalancing:
            status = "rebalancing"
        details = {
            "service": self.service,
            "status": status,
            "uptime_s": round((_now_ms() - self.started_ms) / 1000, 1),
            "rebalances": self.rebalances,
        }
        return status == "ok", details

    # faust signal receivers: (sender, *args, signal=..., **kwargs)
    def _revoked(self, sender: Any, *args: Any, signal: BaseSignalT[Any], **kw: Any) -> None:
        self.rebalancing = True

    def _assigned(self, sender: Any, *args: Any, signal: BaseSignalT[Any], **kw: Any) -> None:
        self.rebalancing = True
        self.assigned_at_ms = _now_ms()
        self.rebalances += 1

    def _complete(self, sender: Any, *args: Any, signal: BaseSignalT[Any], **kw: Any) -> None:
        self.rebalancing = False
        if not self.ready:
            self.ready = True
            log.info("service ready", extra={"service": self.service})
            for callback in self._on_ready:
                callback()


def run_service(
    app: faust.App,
    lifecycle: Lifecycle,
    *,
    settings: Settings,
    topics: Iterable[TopicSpec],
    service_settings: ServiceSettings | None = None,
) -> NoReturn:
    """Run ``app`` until SIGTERM/SIGINT; exits the process (status 0 on a clean stop).

    Exits with status 2 when Kafka is not configured or the topics cannot be created.
    """
    env = service_settings or ServiceSettings()
    setup_logging(lifecycle.service, env.log_level)
    try:
        ensure_topics(settings, specs=[*topics, DLQ])  # 2.
    except LakewardenError as err:
        log.error("cannot start: %s", err, extra={"service": lifecycle.service})
        raise SystemExit(2) from err
    # faust creates its data dir but not the parents (the state dir may be fresh).
    Path(app.conf.datadir).parent.mkdir(parents=True, exist_ok=True)
    health = HealthServer(env.health_port, lifecycle.probe)
    lifecycle.on_first_ready(health.start)  # 4.
    worker = faust.Worker(
        app,
        loglevel=env.log_level,
        quiet=True,
        override_logging=False,
        redirect_stdouts=False,
    )
    # faust's terminal spinner writes cursor escape codes into the service log.
    worker.spinner = None
    try:
        worker.execute_from_commandline()  # 3.
    finally:
        health.stop()


def run_loop_until_signalled(
    service: str, loop: Callable[[threading.Event], None], health: HealthServer
) -> NoReturn:
    """Run a plain (non-faust) service loop until SIGTERM/SIGINT, then stop its health
    endpoint and exit with status 0. ``loop`` returns once the event it is given is set."""
    stop = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        loop(stop)  # 3.
    finally:
        health.stop()
    log.info("stopped", extra={"service": service})
    raise SystemExit(0)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
