"""The health and metrics endpoint every service serves on ``127.0.0.1:<health port>``.

- ``GET /health``: 200 ``{"status": "ok", ...}`` once the service is ready (its first
  partition assignment completed), 503 ``{"status": "starting" | "rebalancing", ...}`` before;
- ``GET /metrics``: the Prometheus exposition of the process's registry.

It runs a stdlib ``ThreadingHTTPServer`` on a daemon thread, not on the service's loop, so a
busy or blocked loop still answers scrapes (and a blocked loop shows up as stale metrics rather
than a dead endpoint). The dev stack treats "the port accepts connections" as "ready", so the
runner starts this server only once the service is ready.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
# Inside a container the endpoint must be reachable on the container's network (the host
# publishes it on its own loopback only): docker-compose.yml sets this to 0.0.0.0.
HOST_ENV = "LAKEWARDEN_HEALTH_HOST"
StatusProbe = Callable[[], tuple[bool, dict[str, Any]]]


class HealthServer:
    """Serves ``/health`` (from ``probe``) and ``/metrics`` (from ``registry``).

    ``probe`` returns ``(healthy, details)``; it runs on the server thread, so it must only
    read plain attributes. ``port`` 0 picks a free port (see ``.port`` after ``start``).
    """

    def __init__(
        self,
        port: int,
        probe: StatusProbe,
        *,
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        self._requested_port = port
        self._probe = probe
        self._registry = registry
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (the requested one until ``start``)."""
        if self._server is None:
            return self._requested_port
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Bind ``127.0.0.1:port`` (``$LAKEWARDEN_HEALTH_HOST`` if set) and serve on a daemon
        thread (idempotent).

        Raises:
            OSError: the port cannot be bound.
        """
        if self._server is not None:
            return
        host = os.environ.get(HOST_ENV) or LOOPBACK
        server = ThreadingHTTPServer((host, self._requested_port), self._handler_class())
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name="health-server", daemon=True
        )
        self._thread.start()
        log.info("health endpoint listening", extra={"port": self.port})

    def stop(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        probe, registry = self._probe, self._registry

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] == "/metrics":
                    self._send(200, CONTENT_TYPE_LATEST, generate_latest(registry))
                elif self.path.split("?", 1)[0] == "/health":
                    healthy, details = probe()
                    body = json.dumps(details, sort_keys=True).encode()
                    self._send(200 if healthy else 503, "application/json", body)
                else:
                    self._send(404, "text/plain", b"not found: try /health or /metrics\n")

            def _send(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                # Scrapes every few seconds would drown the service log.
                return

        return Handler
