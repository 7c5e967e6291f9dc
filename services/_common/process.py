"""Run a service as its own process, as the dev stack does: for tests and benchmarks.

    with ServiceProcess("lakewarden_services.timeline_lock", settings, home=tmp_path) as service:
        ... clients talk to it through Kafka ...
        service.kill()       # kill -9 (the whole process group)
        service.start()      # a new process: same group, same state

The process gets the dev stack's environment contract (``lakewarden/devstack/services.py``):
the settings' Kafka bootstrap and topic prefix, a state dir, a health port on 127.0.0.1;
it is ready when the health port accepts connections, and it is stopped by pid.
"""

from __future__ import annotations

import http.client
import os
import signal
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

from lakewarden.devstack import processes
from lakewarden.settings import Settings


class ServiceProcess:
    """One service process at a time; ``start`` again after ``stop``/``kill`` for a restart.

    ``instance_id`` turns on static group membership, so a restarted process gets its
    partitions back at once instead of after the session timeout of the killed one.
    """

    def __init__(
        self,
        module: str,
        settings: Settings,
        *,
        home: Path,
        instance_id: str | None = "0",
        log_level: str = "INFO",
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.module = module
        self.settings = settings
        self.home = home
        self.instance_id = instance_id
        self.log_level = log_level
        self.extra_env = extra_env or {}
        self.name = module.rsplit(".", 1)[-1]
        self.log_file = home / f"{self.name}.log"
        self.pid_file = home / f"{self.name}.pid"
        self.port = processes.free_port()
        self.pid: int | None = None

    def start(self, *, timeout_s: float = 90.0) -> float:
        """Start the process and wait until it is ready; return the seconds it took.

        Raises:
            DevStackError: it exited during start-up or was not ready in time (with its log).
        """
        if self.pid is not None and processes.pid_alive(self.pid):
            return 0.0
        argv = [sys.executable, "-m", self.module]
        self.pid = processes.spawn(
            argv, log_file=self.log_file, pid_file=self.pid_file, env=self._env()
        )
        return processes.wait_ready(
            self.module,
            self.pid,
            self._healthy,
            timeout_s=timeout_s,
            log_file=self.log_file,
        )

    def stop(self) -> None:
        """SIGTERM (SIGKILL after 15 s) and wait until the process group is gone."""
        if self.pid is not None:
            processes.stop(self.pid, name=self.module)
            self.pid = None

    def kill(self) -> None:
        """SIGKILL the process group (no clean shutdown) and wait until it is gone."""
        if self.pid is None:
            return
        pid, self.pid = self.pid, None
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        processes.wait_for(lambda: not processes.pid_alive(pid), timeout_s=10)
        processes.stop(pid, name=self.module)  # reaps leftovers of the group, if any

    def get(self, path: str) -> tuple[int, str]:
        """GET ``path`` from the health/metrics endpoint: (status, body)."""
        url = f"http://127.0.0.1:{self.port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as err:
            return int(err.code), err.read().decode()

    def metric(self, prefix: str) -> float:
        """The sum of the ``/metrics`` samples whose line starts with ``prefix`` (a metric's
        name: all its label sets; or a name with its labels: that one)."""
        _, body = self.get("/metrics")
        return sum(
            float(line.rsplit(" ", 1)[1]) for line in body.splitlines() if line.startswith(prefix)
        )

    def _healthy(self) -> bool:
        # An HTTP answer, not just a connect: a connect to a free ephemeral port can succeed
        # as a TCP self-connection while nothing listens (seen once while restarting).
        try:
            return self.get("/health")[0] == 200
        except (OSError, http.client.HTTPException):
            return False

    def log_text(self) -> str:
        return self.log_file.read_text() if self.log_file.exists() else ""

    def __enter__(self) -> ServiceProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS": self.settings.kafka.bootstrap_servers or "",
                "LAKEWARDEN_KAFKA__TOPIC_PREFIX": self.settings.kafka.topic_prefix,
                "LAKEWARDEN_STATE_DIR": str(self.home / "state"),
                "LAKEWARDEN_HEALTH_PORT": str(self.port),
                "LAKEWARDEN_LOG_LEVEL": self.log_level,
            }
        )
        if self.instance_id is not None:
            env["LAKEWARDEN_INSTANCE_ID"] = self.instance_id
        env.update(self.extra_env)
        return env


def s3_env(settings: Settings) -> dict[str, str]:
    """``settings``' S3 endpoint and credentials as a child process reads them (tables on S3).

    Raises: ValueError (the settings carry no credentials)."""
    s3 = settings.s3
    if s3.access_key_id is None or s3.secret_access_key is None:
        raise ValueError("the settings carry no S3 credentials")
    return {
        "LAKEWARDEN_S3__ENDPOINT_URL": str(s3.endpoint_url or ""),
        "LAKEWARDEN_S3__REGION": str(s3.region),
        "LAKEWARDEN_S3__ACCESS_KEY_ID": s3.access_key_id.get_secret_value(),
        "LAKEWARDEN_S3__SECRET_ACCESS_KEY": s3.secret_access_key.get_secret_value(),
    }


@contextmanager
def running_services(
    modules: Sequence[str],
    settings: Settings,
    home: Callable[[str], Path],
    *,
    extra_env: dict[str, str] | None = None,
) -> Iterator[list[ServiceProcess]]:
    """``modules`` started in order, each in ``home(<service name>)``, and stopped in reverse
    order afterwards (also those started when a later one fails to start)."""
    started: list[ServiceProcess] = []
    try:
        for module in modules:
            process = ServiceProcess(
                module, settings, home=home(module.rsplit(".", 1)[-1]), extra_env=extra_env
            )
            process.start()
            started.append(process)
        yield started
    finally:
        for process in reversed(started):
            process.stop()
