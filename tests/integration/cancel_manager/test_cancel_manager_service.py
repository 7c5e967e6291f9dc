"""cancel-manager end to end on the real broker, with timeline-lock and heartbeat-monitor:
one process of each per module. Requests and executes through ``CancelClient``, a malformed
request (DLQ, the service keeps serving), unknown tables and instants, an executor killed
with kill -9 whose heartbeat expires (the service then aborts the plan by itself), the same
on S3 (SeaweedFS), a service killed and restarted in between that still knows the table, and
two executor processes on one plan of which exactly one commits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from lakewarden.clients import CancelClient
from lakewarden.events import ensure_topics
from lakewarden.events.topics import CANCEL_REQUESTS
from lakewarden.settings import Settings
from lakewarden.table import Table, Transition
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.testing import wait_until
from lakewarden_services._common.process import ServiceProcess, running_services, s3_env

pytestmark = pytest.mark.kafka

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("v", pa.string())])
EXECUTOR = Path(__file__).with_name("executor_process.py")
BEAT = {"LAKEWARDEN_HEARTBEAT__INTERVAL_S": "0.3", "LAKEWARDEN_HEARTBEAT__TOLERABLE_MISSES": "3"}


@pytest.fixture(scope="module")
def cm_settings(kafka_settings: Settings, s3_settings: Settings) -> Settings:
    kafka = kafka_settings.kafka.model_copy(update={"topic_prefix": f"cm{uuid.uuid4().hex[:8]}."})
    settings = kafka_settings.model_copy(update={"kafka": kafka, "s3": s3_settings.s3})
    ensure_topics(settings)
    return settings


@pytest.fixture(scope="module")
def services(
    cm_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[ServiceProcess]]:
    modules = (
        "lakewarden_services.timeline_lock",
        "lakewarden_services.heartbeat_monitor",
        "lakewarden_services.cancel_manager",
    )
    env = {**BEAT, **s3_env(cm_settings)}
    with running_services(modules, cm_settings, tmp_path_factory.mktemp, extra_env=env) as started:
        yield started


@pytest.fixture(scope="module")
def client(cm_settings: Settings, services: list[ServiceProcess]) -> Iterator[CancelClient]:
    with CancelClient(cm_settings) as cancel_client:
        yield cancel_client


def _fragmented_table(uri: str, settings: Settings | None = None) -> Table:
    """A table whose buckets have several slices (three inserts into append groups are what
    Spark leaves; three upserts of disjoint keys into one bucket each are the cheap stand-in:
    clustering then has one slice per bucket and needs sort_by to plan)."""
    table = Table.create(
        uri,
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        coordinator=EmbeddedCoordinator(),
        settings=settings,
    )
    for n in range(3):
        ids = [n * 10 + i for i in range(5)]
        table.write(pa.table({"id": ids, "region": ["eu"] * 5, "v": ["x"] * 5}, schema=SCHEMA))
    return table


def _plan(table: Table, *, cancellable: bool) -> str:
    instant = table.schedule_clustering(sort_by=["id"], cancellable=cancellable)
    assert instant is not None
    return str(instant)


def _executor(settings: Settings, uri: str, instant: str, mode: str) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.update(BEAT)
    env.update(s3_env(settings))
    env["LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS"] = settings.kafka.bootstrap_servers or ""
    env["LAKEWARDEN_KAFKA__TOPIC_PREFIX"] = settings.kafka.topic_prefix
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[3])
    return subprocess.Popen(
        [sys.executable, str(EXECUTOR), uri, instant, mode],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def _state(table: Table, instant: str) -> Transition:
    mine = table.state().get(instant)
    assert mine is not None
    return mine.state


def test_request_execute_and_bad_requests_through_the_service(
    client: CancelClient, cm_settings: Settings, tmp_path: Path
) -> None:
    table = _fragmented_table(str(tmp_path / "orders"))
    instant = _plan(table, cancellable=True)
    ask = {"table_uri": table.uri, "requester": "test"}
    assert client.request_cancel(table.table_id, instant, reason="r", **ask).status == "accepted"
    assert client.execute_cancel(table.table_id, instant, **ask).status == "aborted"
    assert _state(table, instant) is Transition.ABORTED
    # A malformed request goes to the DLQ; the service keeps serving the next ones.
    producer = Producer(cm_settings.kafka.librdkafka_config())
    producer.produce(CANCEL_REQUESTS.name(cm_settings), b"garbage", key=table.table_id.encode())
    producer.flush(10)
    again = client.request_cancel(table.table_id, instant, reason="again", **ask)
    assert again.status == "already_aborted"
    unknown = client.request_cancel(table.table_id, "20990101000000000", reason="x", **ask)
    assert unknown.status == "unknown_instant" and not unknown.ok
    stranger = client.request_cancel(
        "no-such-table", instant, reason="x", table_uri=str(tmp_path / "nowhere"), requester="t"
    )
    assert stranger.status == "unknown_table"
    fixed = _plan(table, cancellable=False)  # the aborted plan's groups are free again
    refused = client.request_cancel(table.table_id, fixed, reason="x", **ask)
    assert refused.status == "not_cancellable" and "cancellable=true" in (refused.reason or "")
    assert _state(table, fixed) is Transition.REQUESTED


def test_a_killed_executors_cancelled_plan_is_aborted_when_its_heartbeat_expires(
    client: CancelClient, cm_settings: Settings, tmp_path: Path
) -> None:
    table = _fragmented_table(str(tmp_path / "orders"))
    instant = _plan(table, cancellable=True)
    executor = _executor(cm_settings, table.uri, instant, "pause")
    try:
        assert executor.stdout is not None
        assert executor.stdout.readline().strip() == "ready"
        ask = {"table_uri": table.uri, "requester": "test"}
        assert client.request_cancel(table.table_id, instant, reason="r", **ask).ok
        refused = client.execute_cancel(table.table_id, instant, **ask)
        assert refused.status == "refused_executing" and "executor-pause" in (refused.reason or "")
        os.kill(executor.pid, signal.SIGKILL)
        executor.wait(10)
        # heartbeat-monitor declares it dead; cancel-manager aborts the plan by itself.
        wait_until(lambda: _state(table, instant) is Transition.ABORTED, timeout_s=60)
    finally:
        if executor.poll() is None:
            executor.kill()
            executor.wait(10)
        if executor.stdout is not None:
            executor.stdout.close()
    # No data file and nothing staged is left (the job's abort summary under .lakewarden/jobs
    # is the committer's record of the abort, not data).
    leftovers = [
        o.key
        for o in table.storage.list("")
        if instant in o.key and not o.key.startswith(".lakewarden/")
    ]
    assert leftovers == []


def test_two_executor_processes_on_one_plan_commit_exactly_once(
    services: list[ServiceProcess], cm_settings: Settings, tmp_path: Path
) -> None:
    table = _fragmented_table(str(tmp_path / "orders"))
    before = sorted(table.read().to_pylist(), key=lambda r: r["id"])
    instant = _plan(table, cancellable=False)
    runs = [_executor(cm_settings, table.uri, instant, "run") for _ in range(2)]
    outputs = [run.communicate(timeout=120)[0].strip() for run in runs]
    assert sorted(o.startswith("outcome completed") for o in outputs) == [False, True], outputs
    assert _state(table, instant) is Transition.COMPLETED
    assert sorted(table.read().to_pylist(), key=lambda r: r["id"]) == before


@contextmanager
def _paused_executor(
    settings: Settings, table: Table, instant: str
) -> Iterator[Callable[[], None]]:
    """An executor process beating for ``instant`` (paused in its rewrite); yields kill -9."""
    executor = _executor(settings, table.uri, instant, "pause")
    try:
        assert executor.stdout is not None
        assert executor.stdout.readline().strip() == "ready"

        def kill() -> None:
            os.kill(executor.pid, signal.SIGKILL)
            executor.wait(10)

        yield kill
    finally:
        if executor.poll() is None:
            executor.kill()
            executor.wait(10)
        if executor.stdout is not None:
            executor.stdout.close()


def _plan_leftovers(table: Table, instant: str) -> list[str]:
    return [
        o.key
        for o in table.storage.list("")
        if instant in o.key and not o.key.startswith(".lakewarden/")
    ]


def test_on_s3_requests_executes_and_a_killed_executors_plan_is_aborted(
    client: CancelClient, cm_settings: Settings, s3_bucket: str, tmp_path: Path
) -> None:
    table = _fragmented_table(f"s3://{s3_bucket}/cm-{tmp_path.name}/orders", cm_settings)
    ask = {"table_uri": table.uri, "requester": "test"}
    first = _plan(table, cancellable=True)
    assert client.request_cancel(table.table_id, first, reason="r", **ask).status == "accepted"
    assert client.execute_cancel(table.table_id, first, **ask).status == "aborted"
    assert _state(table, first) is Transition.ABORTED
    second = _plan(table, cancellable=True)  # the aborted plan's groups are free again
    with _paused_executor(cm_settings, table, second) as kill:
        assert client.request_cancel(table.table_id, second, reason="r", **ask).ok
        refused = client.execute_cancel(table.table_id, second, **ask)
        assert refused.status == "refused_executing"
        assert _plan_leftovers(table, second)  # the executor's files are on S3
        kill()
        wait_until(lambda: _state(table, second) is Transition.ABORTED, timeout_s=60)
    assert _plan_leftovers(table, second) == []


def test_a_restarted_service_still_acts_on_an_expiry(
    client: CancelClient, services: list[ServiceProcess], cm_settings: Settings, tmp_path: Path
) -> None:
    """The URI a request named survives the service: killed (kill -9, right after answering)
    and restarted, it aborts the plan when the executor dies, though nobody asks again."""
    cancel_manager = services[-1]
    assert cancel_manager.module == "lakewarden_services.cancel_manager"
    table = _fragmented_table(str(tmp_path / "orders"))
    instant = _plan(table, cancellable=True)
    with _paused_executor(cm_settings, table, instant) as kill:
        ask = {"table_uri": table.uri, "requester": "test"}
        assert client.request_cancel(table.table_id, instant, reason="r", **ask).ok
        cancel_manager.kill()
        cancel_manager.start()
        kill()
        wait_until(lambda: _state(table, instant) is Transition.ABORTED, timeout_s=90)
    assert _plan_leftovers(table, instant) == []
