"""The campaign's stack: the dev stack (``lakewarden.devstack``) on fixed ports, and the
signals the fault schedule sends to its parts.

The ports are chosen once (free ones) and kept, so a broker killed with SIGKILL comes back on
the same address and every client and service finds it again. Healing a killed part is one
call of ``DevStack.up``: it forgets parts that died and starts them again.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator, Mapping
from pathlib import Path

from pydantic import SecretStr

from lakewarden.devstack import (
    SERVICES,
    DevSettings,
    DevStack,
    DevStackError,
    ServiceSpec,
    processes,
)
from lakewarden.errors import RetryableError
from lakewarden.settings import KafkaSettings, S3Settings, Settings

__all__ = ["SERVICE_ENV", "WORKLOAD_SERVICES", "CampaignStack"]

# Tight heartbeats so a killed or paused writer is declared dead within a short run (2 s), and
# a cleaner that sweeps every second to roll it back.
SERVICE_ENV = {
    "LAKEWARDEN_HEARTBEAT__INTERVAL_S": "0.5",
    "LAKEWARDEN_HEARTBEAT__TOLERABLE_MISSES": "4",
    "LAKEWARDEN_CLEANER_SWEEP_INTERVAL_S": "1",
    "LAKEWARDEN_LOG_LEVEL": "INFO",
}
# The services Python writers depend on: the lock, liveness, the cleaner's rollback, and
# job-committer (Table.write hands it its job commit when Kafka is configured).
WORKLOAD_SERVICES = ("timeline-lock", "heartbeat-monitor", "cleaner", "job-committer")
BUCKET = "lakewarden"


@contextlib.contextmanager
def _environment(extra: Mapping[str, str]) -> Iterator[None]:
    """``DevStack`` hands its own environment to the services it starts."""
    saved = {key: os.environ.get(key) for key in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class CampaignStack:
    """Kafka, optionally SeaweedFS, and ``services`` in ``state_dir``; nothing starts until
    :meth:`up`."""

    def __init__(self, state_dir: Path, *, with_s3: bool, services: tuple[str, ...]) -> None:
        self.state_dir = state_dir
        self.with_s3 = with_s3
        self.specs: tuple[ServiceSpec, ...] = tuple(
            ServiceSpec(name=s.name, module=s.module, health_port=0, args=s.args)
            for s in SERVICES
            if s.name in services
        )
        self.dev = DevSettings(
            kafka_port=processes.free_port(),
            kafka_controller_port=processes.free_port(),
            s3_port=processes.free_port() if with_s3 else 0,
            bucket=BUCKET,
            startup_timeout_s=180.0,
        )
        self.devstack = DevStack(state_dir, Settings())
        self.paused: set[int] = set()

    @property
    def services(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.specs)

    def up(self) -> None:
        """Start (or restart) every part that is not running.

        A restarted broker may answer its readiness probe and still fail the topic listing
        that follows for a moment on a loaded machine (seed 221): three attempts.

        Raises:
            DevStackError, RetryableError: a part could not be started, three times.
        """
        for attempt in range(3):
            try:
                with _environment(SERVICE_ENV):
                    self.devstack.up(dev=self.dev, with_s3=self.with_s3, services=self.specs)
                return
            except (DevStackError, RetryableError):
                if attempt == 2:
                    raise

    def down(self) -> None:
        self.resume_all()
        self.devstack.down()

    def pid(self, part: str) -> int:
        for health in self.devstack.status():
            if health.name == part:
                return health.pid
        raise KeyError(f"no running part {part!r}")

    def kill(self, part: str) -> None:
        """SIGKILL the part's whole process group (what a crash of its machine does)."""
        pid = self.pid(part)
        self.paused.discard(pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        processes.wait_for(lambda: not processes.pid_alive(pid), timeout_s=10)

    def pause(self, part: str) -> None:
        pid = self.pid(part)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGSTOP)
            self.paused.add(pid)

    def resume(self, part: str) -> None:
        pid = self.pid(part)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGCONT)
        self.paused.discard(pid)

    def resume_all(self) -> None:
        for pid in sorted(self.paused):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGCONT)
        self.paused.clear()

    def unhealthy(self) -> list[str]:
        """The parts that are not running or whose port does not answer."""
        return [h.name for h in self.devstack.status() if not h.healthy]

    def running(self) -> set[str]:
        """The parts whose process is alive."""
        return {h.name for h in self.devstack.status() if h.alive}

    def pids(self) -> set[int]:
        return {h.pid for h in self.devstack.status()}

    def settings(self) -> Settings:
        """Client settings for this stack (what the writers get through their environment)."""
        record_bootstrap = f"127.0.0.1:{self.dev.kafka_port}"
        s3 = S3Settings()
        if self.with_s3:
            access, secret = self.devstack.s3_credentials()
            s3 = S3Settings(
                endpoint_url=f"http://127.0.0.1:{self.dev.s3_port}",
                access_key_id=SecretStr(access),
                secret_access_key=SecretStr(secret),
            )
        return Settings(
            kafka=KafkaSettings(bootstrap_servers=record_bootstrap),
            s3=s3,
            state_dir=self.state_dir,
        )

    def client_env(self) -> dict[str, str]:
        """The environment of a writer process."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEWARDEN_")}
        env.update(SERVICE_ENV)
        env["LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS"] = f"127.0.0.1:{self.dev.kafka_port}"
        env["LAKEWARDEN_STATE_DIR"] = str(self.state_dir)
        if self.with_s3:
            access, secret = self.devstack.s3_credentials()
            env["LAKEWARDEN_S3__ENDPOINT_URL"] = f"http://127.0.0.1:{self.dev.s3_port}"
            env["LAKEWARDEN_S3__ACCESS_KEY_ID"] = access
            env["LAKEWARDEN_S3__SECRET_ACCESS_KEY"] = secret
        return env
