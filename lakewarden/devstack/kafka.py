"""A single-node KRaft Kafka broker run from Apache Kafka's own jars (``infra/kafka/lib``).

Start-up, as :meth:`KafkaBroker.start` performs it:

1. check that the jars were fetched (``make kafka-jars``);
2. render ``infra/kafka/server.properties`` into the broker's home with its ports and data dir;
3. format the KRaft storage with a random cluster id (``kafka.tools.StorageTool``), unless the
   data dir is already formatted, so a restarted dev broker keeps its topics;
4. start ``java -cp 'lib/*' kafka.Kafka server.properties`` in the background (pid file and log
   file in the home folder);
5. wait until it answers a metadata request with itself as a live broker.

Everything binds to 127.0.0.1 only.
"""

from __future__ import annotations

import base64
import logging
import secrets
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakewarden.devstack import processes
from lakewarden.devstack.errors import DevStackError
from lakewarden.devstack.paths import INFRA_DIR

log = logging.getLogger(__name__)

_NODE_KEYS = (
    "node.id",
    "listeners",
    "advertised.listeners",
    "controller.quorum.voters",
    "log.dirs",
    "listener.security.protocol.map",
)


# Set for a cluster (``replication`` > 1) instead of the template's single-node values.
_REPLICATION_KEYS = (
    "default.replication.factor",
    "min.insync.replicas",
    "offsets.topic.replication.factor",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
    "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr",
)


def random_cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (22 characters).

    Kafka's own generator skips ids starting with '-' (they read as command-line options).
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


@dataclass(frozen=True, kw_only=True)
class KafkaBroker:
    """One broker+controller process whose files all live under ``home``."""

    home: Path
    port: int = 9092
    controller_port: int = 9093
    infra_dir: Path = INFRA_DIR
    heap: str = "512m"
    java: str = "java"
    # A second listener with SASL/PLAIN (no TLS: loopback only) for these (user, password)
    # pairs when ``sasl_port`` is set; PLAINTEXT stays the inter-broker and readiness listener.
    sasl_port: int = 0
    sasl_users: tuple[tuple[str, str], ...] = ()
    # One node of a KRaft cluster (``dev up --brokers 3``): its id, every controller
    # (``id@host:port,...``; empty: this node alone), the cluster id all nodes format with,
    # and the replication factor of internal topics (``min.insync.replicas`` is 2 from 3 on).
    node_id: int = 1
    quorum_voters: str = ""
    cluster_id: str | None = None
    replication: int = 1

    def __post_init__(self) -> None:
        for user, password in self.sasl_users:  # they go into a JAAS line between quotes
            if not user.isidentifier() or '"' in password or "\\" in password:
                raise DevStackError(
                    f"SASL user {user!r}: use letters, digits and '_' for the name and no "
                    "quote or backslash in the password."
                )

    @property
    def sasl_bootstrap(self) -> str:
        """``host:port`` of the SASL_PLAINTEXT listener (when ``sasl_port`` is set)."""
        return f"{processes.LOOPBACK}:{self.sasl_port}"

    @property
    def bootstrap(self) -> str:
        return f"{processes.LOOPBACK}:{self.port}"

    @property
    def lib_dir(self) -> Path:
        return self.infra_dir / "kafka" / "lib"

    @property
    def pid_file(self) -> Path:
        return self.home / "kafka.pid"

    @property
    def log_file(self) -> Path:
        return self.home / "kafka.log"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def properties_file(self) -> Path:
        return self.home / "server.properties"

    def check_jars(self) -> None:
        """Raises:
        DevStackError: the Kafka jars are not in ``infra/kafka/lib`` (run ``make kafka-jars``).
        """
        if not any(self.lib_dir.glob("kafka_2.13-*.jar")):
            raise DevStackError(
                f"Kafka jars are missing from {self.lib_dir}. "
                "Help: run `make kafka-jars` (needs Maven and Java 17) and try again."
            )

    def render_properties(self) -> Path:
        """Write ``server.properties`` for this broker: the template with this broker's ports
        and data dir in place of the template's node-specific keys. Returns its path."""
        template = (self.infra_dir / "kafka" / "server.properties").read_text()
        dropped = set(_NODE_KEYS) | ({*_REPLICATION_KEYS} if self.replication > 1 else set())
        kept = [
            line for line in template.splitlines() if line.split("=", 1)[0].strip() not in dropped
        ]
        host = processes.LOOPBACK
        listeners = f"PLAINTEXT://{host}:{self.port},CONTROLLER://{host}:{self.controller_port}"
        advertised = f"PLAINTEXT://{host}:{self.port}"
        protocols = "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
        if self.sasl_port:
            listeners += f",SASL_PLAINTEXT://{host}:{self.sasl_port}"
            advertised += f",SASL_PLAINTEXT://{host}:{self.sasl_port}"
            protocols += ",SASL_PLAINTEXT:SASL_PLAINTEXT"
        node = [
            f"listeners={listeners}",
            f"advertised.listeners={advertised}",
            f"listener.security.protocol.map={protocols}",
            f"node.id={self.node_id}",
            "controller.quorum.voters="
            + (self.quorum_voters or f"{self.node_id}@{host}:{self.controller_port}"),
            f"log.dirs={self.data_dir.resolve()}",
            *self._sasl_properties(),
            *self._replication_properties(),
        ]
        self.home.mkdir(parents=True, exist_ok=True)
        self.properties_file.write_text("\n".join([*kept, "", "# set by lakewarden", *node, ""]))
        return self.properties_file

    def _replication_properties(self) -> list[str]:
        if self.replication <= 1:
            return []
        min_isr = 2 if self.replication >= 3 else 1
        is_min = ("min.isr", "min.insync.replicas")
        return [
            f"{key}={min_isr if key.endswith(is_min) else self.replication}"
            for key in _REPLICATION_KEYS
        ]

    def _sasl_properties(self) -> list[str]:
        if not self.sasl_port:
            return []
        users = " ".join(f'user_{user}="{password}"' for user, password in self.sasl_users)
        return [
            "sasl.enabled.mechanisms=PLAIN",
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config="
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
        ]

    def _jvm(self, main: str, *, heap: str, extra: list[str]) -> list[str]:
        log4j = (self.infra_dir / "kafka" / "log4j2.yaml").resolve()
        return [
            self.java,
            "-Xms64m",
            f"-Xmx{heap}",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            # Plain IPv4 sockets: bound to 127.0.0.1 either way, but without this the JVM opens
            # IPv6 sockets bound to ::ffff:127.0.0.1, which confuses port audits.
            "-Djava.net.preferIPv4Stack=true",
            f"-Dlog4j2.configurationFile={log4j}",
            *extra,
            "-cp",
            f"{self.lib_dir.resolve()}/*",
            main,
        ]

    def format_storage(self) -> bool:
        """Format the KRaft data dir with a new cluster id; skip it when already formatted.

        Returns True when it formatted, False when the data dir already was.

        Raises:
            DevStackError: StorageTool failed; its output is in the message.
        """
        if (self.data_dir / "meta.properties").exists():
            return False
        # A short-lived JVM: C1 only starts faster and this tool does almost no work.
        argv = self._jvm("kafka.tools.StorageTool", heap="256m", extra=["-XX:TieredStopAtLevel=1"])
        cluster_id = self.cluster_id or random_cluster_id()
        argv += ["format", "-t", cluster_id, "-c", str(self.properties_file)]
        argv += ["--ignore-formatted"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise DevStackError(
                f"formatting Kafka storage in {self.data_dir} failed "
                f"(exit {done.returncode}):\n{done.stdout}{done.stderr}"
            )
        return True

    def answers_metadata(self, *, timeout_s: float = 2.0) -> bool:
        """True when the broker answers a metadata request and lists itself as a live broker."""
        if not processes.port_answers(self.port):
            return False
        from confluent_kafka.admin import AdminClient

        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "socket.connection.setup.timeout.ms": int(timeout_s * 1000),
            # librdkafka logs every refused connection; route it to logging, not stderr.
            "logger": logging.getLogger(f"{__name__}.client"),
        }
        admin = AdminClient(config)
        try:
            metadata = admin.list_topics(timeout=timeout_s)
        except Exception:  # KafkaException while the broker is still fenced or loading
            return False
        return len(metadata.brokers) > 0

    def running_pid(self) -> int | None:
        """The pid from this broker's pid file if that process is alive, else None."""
        pid = processes.read_pid_file(self.pid_file)
        return pid if pid is not None and processes.pid_alive(pid) else None

    def start(self, *, timeout_s: float = 90.0, wait: bool = True) -> int:
        """Format (if needed), start the broker and wait until it answers metadata requests
        (``wait=False``: return once it runs; the nodes of a cluster are ready only together,
        so the caller waits for them all with :meth:`wait_ready`).

        Returns the broker's pid. On failure the started process is stopped again.

        Raises:
            DevStackError: jars missing, already running, format failed, or the broker exited
                or did not answer within ``timeout_s`` (the message has its log tail).
        """
        self.check_jars()
        if (pid := self.running_pid()) is not None:
            raise DevStackError(f"a Kafka broker from {self.home} already runs (pid {pid})")
        began = time.monotonic()
        self.render_properties()
        formatted = self.format_storage()
        jvm_opts = ["-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"]
        argv = [*self._jvm("kafka.Kafka", heap=self.heap, extra=jvm_opts)]
        argv.append(str(self.properties_file))
        pid = processes.spawn(argv, log_file=self.log_file, pid_file=self.pid_file)
        if wait:
            self.wait_ready(pid, timeout_s=timeout_s)
        log.info(
            "kafka ready" if wait else "kafka started",
            extra={
                "pid": pid,
                "bootstrap": self.bootstrap,
                "formatted": formatted,
                "seconds": round(time.monotonic() - began, 2),
            },
        )
        return pid

    def wait_ready(self, pid: int, *, timeout_s: float = 90.0) -> None:
        """Wait until the broker answers metadata requests; stop it if it does not.

        Raises:
            DevStackError: it exited or did not answer within ``timeout_s`` (with its log).
        """
        try:
            processes.wait_ready(
                "Kafka broker",
                pid,
                self.answers_metadata,
                timeout_s=timeout_s,
                log_file=self.log_file,
                interval_s=0.2,
            )
        except BaseException:  # also Ctrl-C: never leave a half-started server behind
            self.stop()
            raise

    def stop(self, *, timeout_s: float = 20.0) -> None:
        """Stop the broker recorded in the pid file (if any) and remove the pid file."""
        pid = processes.read_pid_file(self.pid_file)
        if pid is not None:
            processes.stop(pid, timeout_s=timeout_s, name="kafka")
        self.pid_file.unlink(missing_ok=True)
