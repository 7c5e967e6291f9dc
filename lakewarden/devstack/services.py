"""The services ``lakewarden dev up`` runs, one process each.

To add a service, append one line to :data:`SERVICES`::

    ServiceSpec(name="timeline-lock", module="lakewarden_services.timeline_lock", health_port=8101),

What a service process gets from the dev stack (its contract):

- it runs as ``python -m <module> <args...>`` with this virtualenv's Python, in its own process
  group, stdout and stderr appended to ``<state>/services/<name>.log``, pid in ``<name>.pid``;
- environment: ``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS`` (and ``LAKEWARDEN_S3__*`` when the stack
  runs S3), ``LAKEWARDEN_STATE_DIR``, and ``LAKEWARDEN_HEALTH_PORT``;
- it must listen on ``127.0.0.1:$LAKEWARDEN_HEALTH_PORT`` (and nothing but 127.0.0.1) once it is
  ready: the stack waits for that port to accept connections, and ``dev status`` probes it;
- it must exit on SIGTERM within a few seconds (the stack sends SIGKILL after that).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ServiceSpec:
    """How to run one service in the dev stack.

    ``health_port`` is the dev stack's default; 0 means "pick a free port at start".
    ``args`` are appended after ``-m module``; ``{health_port}`` in them is replaced by the
    port actually used.
    """

    name: str
    module: str
    health_port: int
    args: tuple[str, ...] = ()
    needs_s3: bool = False


SERVICES: list[ServiceSpec] = [
    ServiceSpec(name="timeline-lock", module="lakewarden_services.timeline_lock", health_port=8101),
    ServiceSpec(
        name="heartbeat-monitor", module="lakewarden_services.heartbeat_monitor", health_port=8102
    ),
    ServiceSpec(name="job-committer", module="lakewarden_services.job_committer", health_port=8103),
    ServiceSpec(name="error-sink", module="lakewarden_services.error_sink", health_port=8104),
    ServiceSpec(name="cleaner", module="lakewarden_services.cleaner", health_port=8105),
    ServiceSpec(
        name="cancel-manager", module="lakewarden_services.cancel_manager", health_port=8106
    ),
]
