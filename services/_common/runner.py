"""Running a service process until it is told to stop.

``python -m lakewarden_services.<name>`` meets the dev stack's contract
(``lakewarden/devstack/services.py``); every service starts the same way
(``loop_service.serve_loop``; error-sink, whose loop is its own, by hand):

1. logfmt logging on stderr (the stack appends it to the service's log file);
2. the service's topics (and the DLQ) exist, created idempotently (else exit 2);
3. the loop runs; SIGTERM and SIGINT stop it gracefully (the producer flushed, the offsets
   of finished work committed, the group left);
4. once the first partition assignment and its recovery completed, the health endpoint
   listens on ``127.0.0.1:$LAKEWARDEN_HEALTH_PORT`` (the stack's readiness signal).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import NoReturn

from lakewarden_services._common.health import HealthServer

log = logging.getLogger(__name__)


def run_loop_until_signalled(
    service: str, loop: Callable[[threading.Event], None], health: HealthServer
) -> NoReturn:
    """Run a service loop until SIGTERM/SIGINT (step 3), then stop its health endpoint and
    exit with status 0. ``loop`` returns once the event it is given is set."""
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
