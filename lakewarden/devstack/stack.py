"""The local stack: Kafka, optionally S3, and every registered service, each its own process.

:meth:`DevStack.up` starts what is not already running and records each part (pid, start time,
pid file, log file, ports) in ``<state>/stack.json`` as soon as it runs; :meth:`DevStack.down`
stops exactly the recorded parts, newest first, and removes their pid files;
:meth:`DevStack.status` reports each recorded part's health. Folder layout::

    <state>/stack.json
    <state>/kafka/{kafka.pid,kafka.log,server.properties,data/}
    <state>/s3/{weed.pid,weed.log,s3-identities.json,data/}
    <state>/services/<name>.{pid,log}
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lakewarden.devstack import _state, processes
from lakewarden.devstack._state import PartRecord, StackRecord
from lakewarden.devstack.config import DevSettings
from lakewarden.devstack.kafka import KafkaBroker, random_cluster_id
from lakewarden.devstack.s3 import DEV_ACCESS_KEY, DEV_SECRET_KEY, SeaweedS3, remove_socket_files
from lakewarden.devstack.services import ServiceSpec
from lakewarden.devstack.settle import wait_topics_settled
from lakewarden.errors import RetryableError
from lakewarden.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartHealth:
    """What ``dev status`` knows about one part."""

    name: str
    kind: str
    pid: int
    alive: bool
    port: int
    answering: bool
    log_file: Path

    @property
    def healthy(self) -> bool:
        return self.alive and self.answering


def _port(requested: int) -> int:
    return requested if requested != 0 else processes.free_port()


def _part(
    name: str, kind: str, pid: int, pid_file: Path, log_file: Path, **ports: int
) -> PartRecord:
    """The record of a started part; its first port is the one ``status`` probes."""
    health_port = next(iter(ports.values()))
    return PartRecord.model_validate(
        {
            "name": name,
            "kind": kind,
            "pid": pid,
            "start_ticks": processes.process_start_ticks(pid),
            "pid_file": pid_file,
            "log_file": log_file,
            "health_port": health_port,
            "ports": ports,
        }
    )


def _node_part(node_id: int) -> str:
    """The part (and folder) name of a cluster node: ``kafka`` for node 1, ``kafka-2`` ..."""
    return "kafka" if node_id == 1 else f"kafka-{node_id}"


def _saved_ports(home: Path) -> tuple[int, int] | None:
    """(client, controller) port of a node that ran before (its rendered properties), so
    a restarted node keeps its address and its place in the controller quorum."""
    properties = home / "server.properties"
    if not properties.exists():
        return None
    for line in properties.read_text().splitlines():
        if line.startswith("listeners="):
            found = {
                item.split("://")[0]: int(item.rsplit(":", 1)[1])
                for item in line.split("=", 1)[1].split(",")
            }
            return found["PLAINTEXT"], found["CONTROLLER"]
    return None


def _cluster_id(state_dir: Path) -> str:
    """The cluster id every node formats with, kept in ``<state>/kafka-cluster-id``."""
    path = state_dir / "kafka-cluster-id"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(random_cluster_id())
    return path.read_text().strip()


class DevStack:
    """The stack of one state folder. Creating it starts nothing."""

    def __init__(self, state_dir: Path, settings: Settings) -> None:
        self.state_dir = state_dir.resolve()
        self.settings = settings

    def up(
        self, *, dev: DevSettings, with_s3: bool, services: Sequence[ServiceSpec]
    ) -> StackRecord:
        """Start every part that is not running yet; return the stack record.

        Steps: 1. forget recorded parts that died; 2. Kafka; 3. the topics; 4. S3 if asked;
        5. each service. If a step fails, the parts this call started are stopped again.

        Raises:
            DevStackError: a part could not be started (the message says which and why).
        """
        record = self._forget_dead(_state.load(self.state_dir))
        before = {part.name for part in record.parts}
        try:
            record = self._ensure_kafka(record, dev)
            self._ensure_topics(record, timeout_s=dev.startup_timeout_s)
            if with_s3:
                record = self._ensure_s3(record, dev)
            for spec in services:
                record = self._ensure_service(record, spec, timeout_s=dev.startup_timeout_s)
        except BaseException:
            # Includes Ctrl-C: leave nothing running that this call started.
            record = _state.load(self.state_dir)
            for part in reversed(record.parts):
                if part.name not in before:
                    record = self._stop_part(record, part)
            raise
        return record

    def down(self) -> list[str]:
        """Stop every recorded part, newest first; return the names of those stopped.

        Raises:
            DevStackError: a part survived SIGKILL.
        """
        record = _state.load(self.state_dir)
        stopped = []
        for part in reversed(record.parts):
            if part.is_ours_and_alive():
                stopped.append(part.name)
            record = self._stop_part(record, part)
        return stopped

    def status(self) -> list[PartHealth]:
        """The health of each recorded part: process alive, health port answering."""
        return [
            PartHealth(
                name=part.name,
                kind=part.kind,
                pid=part.pid,
                alive=part.is_ours_and_alive(),
                port=part.health_port,
                answering=processes.port_answers(part.health_port),
                log_file=part.log_file,
            )
            for part in _state.load(self.state_dir).parts
        ]

    def _stop_part(self, record: StackRecord, part: PartRecord) -> StackRecord:
        if part.is_ours_and_alive():
            processes.stop(part.pid, name=part.name)
            if part.kind == "s3":
                remove_socket_files(part.ports.values())
        elif processes.pid_alive(part.pid):
            log.warning(
                "pid now belongs to another process; not signalling it",
                extra={"part": part.name, "pid": part.pid},
            )
        if processes.read_pid_file(part.pid_file) == part.pid:
            part.pid_file.unlink(missing_ok=True)
        record = record.without_part(part.name)
        _state.save(self.state_dir, record)
        return record

    def _forget_dead(self, record: StackRecord) -> StackRecord:
        for part in record.parts:
            if not part.is_ours_and_alive():
                log.warning("recorded part is not running", extra={"part": part.name})
                record = self._stop_part(record, part)
        return record

    def _save_started(self, record: StackRecord, part: PartRecord) -> StackRecord:
        record = record.with_part(part)
        _state.save(self.state_dir, record)
        return record

    def _ensure_kafka(self, record: StackRecord, dev: DevSettings) -> StackRecord:
        if dev.brokers > 1:
            return self._ensure_kafka_cluster(record, dev)
        if (part := record.part("kafka")) is not None:
            log.info("kafka already running", extra={"pid": part.pid})
            return record
        broker = KafkaBroker(
            home=self.state_dir / "kafka",
            port=_port(dev.kafka_port),
            controller_port=_port(dev.kafka_controller_port),
            heap=dev.kafka_heap,
        )
        pid = broker.start(timeout_s=dev.startup_timeout_s)
        part = _part(
            "kafka",
            "kafka",
            pid,
            broker.pid_file,
            broker.log_file,
            kafka=broker.port,
            controller=broker.controller_port,
        )
        record = record.model_copy(update={"bootstrap_servers": broker.bootstrap})
        return self._save_started(record, part)

    def _ensure_kafka_cluster(self, record: StackRecord, dev: DevSettings) -> StackRecord:
        """Start the nodes of the KRaft cluster that are not running (all of them the first
        time, one after a crash), then wait until each answers: a node is ready only once a
        majority of controllers runs, so they start together and are waited for together."""
        nodes = self._cluster_nodes(record, dev)
        started = []
        for node in nodes:
            name = _node_part(node.node_id)
            if record.part(name) is not None:
                continue
            pid = node.start(timeout_s=dev.startup_timeout_s, wait=False)
            ports = {"kafka": node.port, "controller": node.controller_port}
            part = _part(name, "kafka", pid, node.pid_file, node.log_file, **ports)
            record = self._save_started(record, part)
            started.append((node, pid))
        for node, pid in started:
            node.wait_ready(pid, timeout_s=dev.startup_timeout_s)
        bootstrap = ",".join(node.bootstrap for node in nodes)
        record = record.model_copy(update={"bootstrap_servers": bootstrap})
        _state.save(self.state_dir, record)
        return record

    def _cluster_nodes(self, record: StackRecord, dev: DevSettings) -> list[KafkaBroker]:
        """The cluster's nodes: ports and cluster id as recorded (a restarted node keeps its
        address), else new ones (node 1 on ``dev.kafka_port``)."""
        ports: list[tuple[int, int]] = []
        for node_id in range(1, dev.brokers + 1):
            part = record.part(_node_part(node_id))
            if part is not None:
                ports.append((part.ports["kafka"], part.ports["controller"]))
            elif (saved := _saved_ports(self.state_dir / _node_part(node_id))) is not None:
                ports.append(saved)
            elif node_id == 1:
                ports.append((_port(dev.kafka_port), _port(dev.kafka_controller_port)))
            else:
                ports.append((processes.free_port(), processes.free_port()))
        host = processes.LOOPBACK
        voters = ",".join(f"{n}@{host}:{c}" for n, (_, c) in enumerate(ports, start=1))
        cluster_id = _cluster_id(self.state_dir)
        return [
            KafkaBroker(
                home=self.state_dir / _node_part(node_id),
                port=port,
                controller_port=controller,
                heap=dev.kafka_heap,
                node_id=node_id,
                quorum_voters=voters,
                cluster_id=cluster_id,
                replication=min(dev.brokers, 3),
            )
            for node_id, (port, controller) in enumerate(ports, start=1)
        ]

    def _ensure_topics(self, record: StackRecord, *, timeout_s: float) -> None:
        """Create the project's topics, retrying for ``timeout_s``: a cluster that has just
        started may drop the first requests while its controllers settle (a 3-node KRaft
        cluster answered "Broker handle destroyed" seconds after every node was ready).

        Then wait until every broker's own metadata shows every topic settled
        (``settle.wait_topics_settled``).

        Raises: RetryableError (the last refusal) when ``timeout_s`` passed; DevStackError
        (a broker that did not agree on the topics in time)."""
        try:
            from lakewarden.events.topics import ensure_topics
        except ModuleNotFoundError as err:
            if err.name not in ("lakewarden.events", "lakewarden.events.topics"):
                raise
            log.warning("topics not created: lakewarden.events.topics does not exist yet")
            return
        from lakewarden.events.topics import TOPICS

        servers = (record.bootstrap_servers or "").split(",")
        replication = min(len(servers), 3)
        settings = self._client_settings(record)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                created = ensure_topics(settings, replication_factor=replication)
                break
            except RetryableError as err:
                if time.monotonic() >= deadline:
                    raise
                log.warning("topics not ready yet, retrying", extra={"error": str(err)})
                time.sleep(1.0)  # ensure_topics is idempotent: the next round creates the rest
        # Acknowledged by the controllers is not yet known to every broker (``settle``).
        partitions = {spec.name(settings): spec.partitions for spec in TOPICS}
        wait_topics_settled(
            settings,
            servers,
            partitions,
            replication=replication,
            timeout_s=max(deadline - time.monotonic(), 30.0),
        )
        log.info("topics ready", extra={"topics_created": len(created)})

    def _client_settings(self, record: StackRecord) -> Settings:
        kafka = self.settings.kafka.model_copy(
            update={"bootstrap_servers": record.bootstrap_servers}
        )
        return self.settings.model_copy(update={"kafka": kafka, "state_dir": self.state_dir})

    def _ensure_s3(self, record: StackRecord, dev: DevSettings) -> StackRecord:
        if (part := record.part("s3")) is not None:
            log.info("s3 already running", extra={"pid": part.pid})
            return record
        access_key, secret_key = self.s3_credentials()
        endpoint = SeaweedS3(
            home=self.state_dir / "s3",
            port=_port(dev.s3_port),
            access_key=access_key,
            secret_key=secret_key,
            region=self.settings.s3.region,
        )
        pid = endpoint.start(timeout_s=dev.startup_timeout_s, bucket=dev.bucket)
        part = _part("s3", "s3", pid, endpoint.pid_file, endpoint.log_file, **endpoint.all_ports())
        record = record.model_copy(update={"s3_endpoint_url": endpoint.endpoint_url})
        return self._save_started(record, part)

    def _service_env(self, record: StackRecord, health_port: int) -> dict[str, str]:
        env = dict(os.environ)
        env["LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS"] = record.bootstrap_servers or ""
        env["LAKEWARDEN_STATE_DIR"] = str(self.state_dir)
        env["LAKEWARDEN_HEALTH_PORT"] = str(health_port)
        if record.s3_endpoint_url is not None:
            access_key, secret_key = self.s3_credentials()
            env["LAKEWARDEN_S3__ENDPOINT_URL"] = record.s3_endpoint_url
            env["LAKEWARDEN_S3__REGION"] = self.settings.s3.region
            env["LAKEWARDEN_S3__ACCESS_KEY_ID"] = access_key
            env["LAKEWARDEN_S3__SECRET_ACCESS_KEY"] = secret_key
        return env

    def s3_credentials(self) -> tuple[str, str]:
        """The local S3 endpoint's (access key, secret): the settings' when they name both,
        else the dev stack's well-known pair (only ever used for this local endpoint)."""
        s3 = self.settings.s3
        if s3.access_key_id is not None and s3.secret_access_key is not None:
            return s3.access_key_id.get_secret_value(), s3.secret_access_key.get_secret_value()
        return DEV_ACCESS_KEY, DEV_SECRET_KEY

    def _ensure_service(
        self, record: StackRecord, spec: ServiceSpec, *, timeout_s: float
    ) -> StackRecord:
        if (part := record.part(spec.name)) is not None:
            log.info("service already running", extra={"part": spec.name, "pid": part.pid})
            return record
        port = _port(spec.health_port)
        home = self.state_dir / "services"
        pid_file, log_file = home / f"{spec.name}.pid", home / f"{spec.name}.log"
        args = [arg.replace("{health_port}", str(port)) for arg in spec.args]
        argv = [sys.executable, "-m", spec.module, *args]
        env = self._service_env(record, port)
        pid = processes.spawn(argv, log_file=log_file, pid_file=pid_file, env=env)
        record = self._save_started(
            record, _part(spec.name, "service", pid, pid_file, log_file, health=port)
        )
        processes.wait_ready(
            f"service {spec.name}",
            pid,
            lambda: processes.port_answers(port),
            timeout_s=timeout_s,
            log_file=log_file,
        )
        log.info("service ready", extra={"part": spec.name, "pid": pid, "port": port})
        return record
