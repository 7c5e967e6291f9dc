"""The local stack and the session fixtures, against real processes.

- the fixtures' broker and S3 endpoint work and listen on 127.0.0.1 only;
- missing Kafka jars fail with what to run;
- stopping escalates to SIGKILL, and a reused pid is never signalled;
- ``lakewarden dev up`` → ``status`` → ``down`` on free ports in a temp state folder leaves no
  process behind, and everything it started listened on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from lakewarden.cli import cli
from lakewarden.devstack import DevStack, DevStackError, KafkaBroker, ServiceSpec, _state, processes
from lakewarden.devstack._state import PartRecord, StackRecord
from lakewarden.settings import Settings

# 127.0.0.1 as /proc/net/tcp writes it (little-endian), and as an IPv4-mapped IPv6 address.
LOOPBACK = {("tcp", "0100007F"), ("tcp6", "0000000000000000FFFF00000100007F")}


def listening_sockets(pids: set[int]) -> list[tuple[str, str, int]]:
    """(family, local address hex, port) of every listening TCP socket the pids hold."""
    inodes = set()
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        for fd in fd_dir.iterdir() if fd_dir.exists() else ():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = []
    for family in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{family}").read_text().splitlines()[1:]:
            cols = line.split()
            address, port_hex = cols[1].rsplit(":", 1)
            if cols[3] == "0A" and cols[9] in inodes:  # 0A = LISTEN
                found.append((family, address, int(port_hex, 16)))
    return found


def assert_loopback_only(pids: set[int], expected_ports: set[int]) -> None:
    sockets = listening_sockets(pids)
    assert expected_ports <= {port for _, _, port in sockets}, sockets
    exposed = [s for s in sockets if (s[0], s[1]) not in LOOPBACK]
    assert exposed == [], f"listening beyond 127.0.0.1: {exposed}"


def test_fixture_broker_round_trip_on_loopback(
    kafka_broker: KafkaBroker, kafka_bootstrap: str
) -> None:
    topic = f"devstack-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(10)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(topic, key=b"k", value=b"hello")
    assert producer.flush(10) == 0
    consumer = Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": topic, "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([topic])
        message = None
        for _ in range(40):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                break
        assert message is not None and message.value() == b"hello"
    finally:
        consumer.close()
    pid = kafka_broker.running_pid()
    assert pid is not None
    ports = {kafka_broker.port, kafka_broker.controller_port}
    assert_loopback_only(processes.group_members(pid), ports)


def test_broker_is_kafka_4_and_logs_through_log4j2(kafka_broker: KafkaBroker) -> None:
    """Kafka 4 logs through Log4j 2. Without the slf4j binding (log4j-slf4j-impl) slf4j falls
    back to its no-op logger, and without ``infra/kafka/log4j2.yaml`` Log4j 2 keeps only errors:
    either way the broker's INFO lines, its version among them, never reach its log file."""
    log = kafka_broker.log_file.read_text()
    assert re.search(r"INFO Kafka version: 4\.\d+\.\d+ ", log), log[-2000:]


def test_fixture_s3_bucket_with_credentials(s3_settings: Settings, s3_bucket: str) -> None:
    import boto3
    from botocore.exceptions import ClientError

    s3 = s3_settings.s3
    client = boto3.client(
        "s3",
        endpoint_url=s3.endpoint_url,
        region_name=s3.region,
        aws_access_key_id=s3.access_key_id.get_secret_value(),
        aws_secret_access_key=s3.secret_access_key.get_secret_value(),
    )
    key = f"devstack/{uuid.uuid4().hex}"
    client.put_object(Bucket=s3_bucket, Key=key, Body=b"payload")
    assert client.get_object(Bucket=s3_bucket, Key=key)["Body"].read() == b"payload"
    stranger = boto3.client(
        "s3",
        endpoint_url=s3.endpoint_url,
        region_name=s3.region,
        aws_access_key_id="nobody",
        aws_secret_access_key="wrong",
    )
    with pytest.raises(ClientError, match="InvalidAccessKeyId|AccessDenied|SignatureDoesNotMatch"):
        stranger.get_object(Bucket=s3_bucket, Key=key)


def test_missing_kafka_jars_fail_with_what_to_run(tmp_path: Path) -> None:
    broker = KafkaBroker(home=tmp_path / "kafka", infra_dir=tmp_path / "empty-infra")
    with pytest.raises(DevStackError, match="make kafka-jars"):
        broker.start()
    assert not broker.pid_file.exists()


def test_stop_escalates_to_sigkill(tmp_path: Path) -> None:
    argv = ["sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.1; done"]
    pid = processes.spawn(argv, log_file=tmp_path / "log", pid_file=tmp_path / "pid")
    assert processes.wait_for(lambda: "ready" in (tmp_path / "log").read_text(), timeout_s=5)
    processes.stop(pid, timeout_s=0.5, name="stubborn")
    assert not processes.pid_alive(pid)
    assert processes.group_members(pid) == set()  # the sleep children went with it


def test_down_never_signals_a_reused_pid(tmp_path: Path) -> None:
    pid = processes.spawn(["sleep", "30"], log_file=tmp_path / "log", pid_file=tmp_path / "pid")
    try:
        ticks = processes.process_start_ticks(pid)
        assert ticks is not None
        stale = PartRecord(
            name="old",
            kind="service",
            pid=pid,
            start_ticks=ticks + 1,
            pid_file=tmp_path / "pid",
            log_file=tmp_path / "log",
            health_port=1,
            ports={},
        )
        _state.save(tmp_path, StackRecord(parts=(stale,)))
        assert DevStack(tmp_path, Settings()).down() == []
        assert processes.pid_alive(pid)
        assert not _state.record_path(tmp_path).exists()
    finally:
        processes.stop(pid, timeout_s=2)


@pytest.mark.slow
def test_dev_up_status_down_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A stand-in service (no real one exists yet): a plain HTTP server on the health port.
    fake = ServiceSpec(
        name="fake-service",
        module="http.server",
        health_port=0,
        args=("--bind", "127.0.0.1", "{health_port}"),
    )
    monkeypatch.setattr("lakewarden.cli.dev.SERVICES", [fake])
    state = tmp_path / "state"
    runner = CliRunner()
    up = runner.invoke(
        cli,
        [
            "dev",
            "up",
            "--state-dir",
            str(state),
            "--s3",
            "--kafka-port",
            "0",
            "--kafka-controller-port",
            "0",
            "--s3-port",
            "0",
            "--bucket",
            "devstack-test",
        ],
    )
    try:
        assert up.exit_code == 0, up.output
        record = _state.load(state)
        assert [part.name for part in record.parts] == ["kafka", "s3", "fake-service"]
        groups = {part.name: processes.group_members(part.pid) for part in record.parts}
        for part in record.parts:
            assert groups[part.name], f"{part.name} is not running"
            assert part.pid_file.read_text().strip() == str(part.pid)
            assert_loopback_only(groups[part.name], set(part.ports.values()))

        status = runner.invoke(cli, ["dev", "status", "--json", "--state-dir", str(state)])
        assert status.exit_code == 0, status.output
        rows = json.loads(status.output)
        assert [(row["name"], row["alive"], row["answering"]) for row in rows] == [
            ("kafka", True, True),
            ("s3", True, True),
            ("fake-service", True, True),
        ]
    finally:
        down = runner.invoke(cli, ["dev", "down", "--state-dir", str(state)])
    assert down.exit_code == 0, down.output
    assert "stopped fake-service, s3, kafka" in down.output
    for part in record.parts:
        assert processes.group_members(part.pid) == set(), f"{part.name} left processes behind"
        assert not processes.pid_alive(part.pid)
        assert not part.pid_file.exists()
        assert not processes.port_answers(part.health_port)
    assert not _state.record_path(state).exists()
    s3_ports = next(part.ports for part in record.parts if part.kind == "s3").values()
    leftovers = [p for port in s3_ports for p in Path("/tmp").glob(f"seaweedfs-*-{port}.sock")]
    assert leftovers == []
    after = runner.invoke(cli, ["dev", "status", "--state-dir", str(state)])
    assert after.exit_code == 1 and "stack is down" in after.output


def test_console_script_reports_a_stopped_stack(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "lakewarden"
    done = subprocess.run(
        [str(script), "dev", "status", "--state-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "stack is down" in done.stdout


def test_cli_finds_subcommands_by_module() -> None:
    import click

    ctx = click.Context(cli)
    assert "dev" in cli.list_commands(ctx)
    dev = cli.get_command(ctx, "dev")
    assert isinstance(dev, click.Group)
    assert set(dev.commands) == {"up", "down", "status"}
    assert cli.get_command(ctx, "no-such-command") is None
    assert cli.get_command(ctx, "_logging") is None  # private modules are not commands


def test_stack_logs_are_logfmt() -> None:
    import logging

    from lakewarden.logfmt import LogfmtFormatter

    record = logging.LogRecord(
        "lakewarden.devstack", logging.INFO, __file__, 1, "kafka ready", None, None
    )
    record.pid = 42
    record.bootstrap = "127.0.0.1:9092"
    record.note = 'has "quotes" and spaces'
    line = LogfmtFormatter().format(record)
    stamp, rest = line.split(" ", 1)
    assert stamp.startswith("ts=") and stamp.endswith("Z")
    assert rest == (
        'level=info logger=lakewarden.devstack msg="kafka ready" pid=42 '
        'bootstrap=127.0.0.1:9092 note="has \\"quotes\\" and spaces"'
    )
