"""timeline-lock when things die: a holder killed with -9, the service killed with -9 while
leases are held, and a writer paused (SIGSTOP) past its lease while committing."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest

from lakewarden.api.table import Table
from lakewarden.clients import KafkaCoordinator, LockClient
from lakewarden.events import EventConsumer, ensure_topics
from lakewarden.settings import Settings
from lakewarden.table.instant import Transition
from lakewarden.testing import wait_until
from lakewarden_services._common.process import ServiceProcess

pytestmark = pytest.mark.timeout(240)

_PENDING = "lakewarden_lock_changelog_pending_tables"

CHILD = Path(__file__).with_name("_lock_children.py")


class Child:
    """A child process whose stdout lines the test waits for."""

    def __init__(self, settings: Settings, *args: str) -> None:
        env = dict(os.environ)
        env["LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS"] = settings.kafka.bootstrap_servers or ""
        env["LAKEWARDEN_KAFKA__TOPIC_PREFIX"] = settings.kafka.topic_prefix
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def expect(self, prefix: str, timeout_s: float = 60) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.seen.append(line)
            if line.startswith(prefix):
                return line
        raise AssertionError(f"child never printed {prefix!r}; it printed: {self.seen[-20:]}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._reader.join(5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@contextmanager
def child(settings: Settings, *args: str) -> Iterator[Child]:
    process = Child(settings, *args)
    try:
        yield process
    finally:
        process.close()


def test_a_killed_holders_lease_expires_and_the_next_waiter_gets_it(
    lock_settings: Settings, lock_service: ServiceProcess, make_client: type[LockClient]
) -> None:
    """End to end: the renewing holder keeps the lock, its kill hands it to the waiter. How
    soon after the ttl the service expires a lease is checked on explicit times by the expiry
    scanner's unit tests (test_lock_handler.py), not here against a loaded machine's clock."""
    ttl_s = 2.0
    waiter = make_client(lock_settings)
    with child(lock_settings, "hold", "doomed", str(ttl_s)) as holder:
        token = int(holder.expect("HOLDING").split()[1])
        thread, granted = _queued_acquire(waiter, "doomed", ttl_s=5, wait_s=30)
        time.sleep(ttl_s)  # the holder has been renewing all along: the lease is alive
        assert not granted
        holder.proc.send_signal(signal.SIGKILL)
        thread.join(30)
    [new_token] = granted
    assert new_token == token + 1


def test_a_service_killed_with_leases_held_comes_back_with_them(
    lock_settings: Settings, tmp_path: Path, make_client: type[LockClient]
) -> None:
    # Offsets committed only every 300 s: what this test sends is delivered again after the
    # kill and must not be applied twice.
    service = ServiceProcess(
        "lakewarden_services.timeline_lock",
        lock_settings,
        home=tmp_path,
        extra_env={"LAKEWARDEN_COMMIT_INTERVAL_S": "300"},
    )
    service.start()
    try:
        _kill_and_restart_under_load(service, lock_settings, make_client)
    finally:
        service.stop()


def _kill_and_restart_under_load(
    service: ServiceProcess, settings: Settings, make_client: type[LockClient]
) -> None:
    holder, waiter, busy = (make_client(settings, owner=n) for n in ("h", "w", "b"))
    for _ in range(20):
        with busy.hold("burst", ttl_s=20, wait_s=10):
            pass
    lease = holder.acquire("shared", ttl_s=20, wait_s=10)
    queued = threading.Event()
    got: list[int] = []
    thread = threading.Thread(
        target=lambda: got.append(
            waiter.acquire("shared", ttl_s=20, wait_s=60, on_queued=lambda _: queued.set()).token
        )
    )
    thread.start()
    assert queued.wait(10)
    # Changelog records are written every 0.25 s, off the request path: once they cover
    # everything so far, the requests redelivered after the kill are skipped by offset (a
    # kill before that write re-applies them instead: the next test).
    wait_until(lambda: _metric(service, _PENDING) == 0, 30, "the changelog to be written")

    service.kill()
    killed_at = time.monotonic()
    service.start()
    restarted_at = time.monotonic()

    # renewals succeed again: the holder's confirmed deadline moves past the restart
    deadline = restarted_at + 20
    while lease.confirmed_at <= restarted_at and time.monotonic() < deadline:
        time.sleep(0.1)
    assert lease.confirmed_at > killed_at and not lease.lost, "renewals did not come back"
    assert not got, "the waiter was granted while the holder still held the lease"
    holder.release(lease)
    thread.join(30)
    assert got == [lease.token + 1]  # tokens keep increasing
    with busy.hold("burst", ttl_s=20, wait_s=10) as after:
        assert after.token == 21  # the 20 redelivered cycles were not applied twice
    # ...and they were redelivered (read again, skipped by offset), not silently lost
    assert _metric(service, "lakewarden_lock_duplicate_requests_total") >= 40


def test_a_crash_between_grants_and_their_changelog_write_re_derives_them(
    lock_settings: Settings, tmp_path: Path, make_client: type[LockClient]
) -> None:
    """timeline-lock killed after granting, before any changelog record was written (the
    interval is 300 s here): the restarted service applies the same requests again, from the
    last committed offset, to the same holder, token and queue."""
    service = ServiceProcess(
        "lakewarden_services.timeline_lock",
        lock_settings,
        home=tmp_path,
        extra_env={"LAKEWARDEN_LOCK_CHANGELOG_INTERVAL_S": "300"},
    )
    service.start()
    try:
        holder = make_client(lock_settings, owner="h")
        waiter = make_client(lock_settings, owner="w")
        first = holder.acquire("crashed", ttl_s=6, wait_s=10)
        assert holder.release(first, wait_s=10)
        lease = holder.acquire("crashed", ttl_s=6, wait_s=10)
        thread, got = _queued_acquire(waiter, "crashed", ttl_s=6, wait_s=60)
        assert (first.token, lease.token) == (1, 2)
        assert _metric(service, _PENDING) == 1  # "crashed": changed, no record yet
        assert _changelog_records(lock_settings) == 0

        service.kill()
        service.start()
        restarted_at = time.monotonic()
        # the holder's renewals (every 2 s) are answered again: its token 2 is the holder's
        wait_until(lambda: lease.confirmed_at > restarted_at, 30, "a renewal after the restart")
        assert not lease.lost and not got, "the waiter was granted while the holder held it"
        holder.release(lease)
        thread.join(30)
        assert got == [3]  # the same queue, the next token
        assert _metric(service, "lakewarden_lock_duplicate_requests_total") == 0  # re-applied
    finally:
        service.stop()


def _queued_acquire(
    client: LockClient, table_id: str, *, ttl_s: float, wait_s: float
) -> tuple[threading.Thread, list[int]]:
    """A thread acquiring ``table_id`` through ``client``, returned once the service queued it
    (the lock is held by someone else); the token it is granted lands in the list."""
    queued = threading.Event()
    granted: list[int] = []

    def wait() -> None:
        lease = client.acquire(
            table_id, ttl_s=ttl_s, wait_s=wait_s, on_queued=lambda _: queued.set()
        )
        granted.append(lease.token)

    thread = threading.Thread(target=wait)
    thread.start()
    assert queued.wait(10), f"the acquire of {table_id} was never queued"
    return thread, granted


def _changelog_records(settings: Settings) -> int:
    """How many records timeline-lock's changelog topic holds (over its partitions)."""
    from lakewarden_services.timeline_lock.app import LOCKS_CHANGELOG

    consumer = EventConsumer(settings, group_id=None, dead_letters=False)
    topic, partitions = LOCKS_CHANGELOG.name(settings), range(LOCKS_CHANGELOG.partitions)
    try:
        ends = [consumer.watermarks(topic, p, timeout_s=10) for p in partitions]
        return sum(high - low for low, high in ends)
    finally:
        consumer.close()


def _metric(service: ServiceProcess, name: str) -> float:
    _, text = service.get("/metrics")
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


@pytest.mark.parametrize("variant", ["trust", "never-lost"])
def test_a_writer_paused_past_its_lease_cannot_complete(
    variant: str,
    lock_settings: Settings,
    lock_service: ServiceProcess,
    tmp_path: Path,
) -> None:
    """``trust``: the lease reports lost on resume, the transaction stops before appending
    (LeaseLostError). ``never-lost``: a lease that never says so (a pause between the check
    and the write); the log's conflict rule stops the late ``completed``."""
    ensure_topics(lock_settings)  # the writers also publish heartbeats
    uri = str(tmp_path / "orders")
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    Table.create(uri, name="orders", record_key="id", schema=schema)
    # Both writers commit in their own process (kafka.job_commits = embedded): the test is
    # about a writer's own `completed` append under a lease it lost.
    kafka = lock_settings.kafka.model_copy(update={"job_commits": "embedded"})
    coordinator = KafkaCoordinator(lock_settings.model_copy(update={"kafka": kafka}))
    try:
        with child(lock_settings, "paused-writer", uri, variant) as writer:
            paused_token = int(writer.expect("PAUSED").split()[1])
            # the writer holds the lock for its `completed` step and is stopped; its lease
            # expires (ttl 2 s) and this writer takes the table over
            table = Table.open(uri, coordinator=coordinator)
            mine = table.write(
                pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": ["parent"] * 3})
            )
            writer.proc.send_signal(signal.SIGCONT)
            result = writer.expect("RESULT")
            writer.proc.wait(30)
    finally:
        coordinator.close()
    expected = "LeaseLostError" if variant == "trust" else "OverlappingCommitConflict"
    assert result.startswith(f"RESULT {expected}"), result
    table = Table.open(uri)
    assert sorted(table.read().column("v").to_pylist()) == ["parent"] * 3
    states = {s.instant: s for s in table.timeline()}
    assert states[mine.instant].state is Transition.COMPLETED
    [theirs] = [s for i, s in states.items() if i != mine.instant]
    assert theirs.state is Transition.ROLLED_BACK
    # every entry records its writer's fencing token; nothing was appended under the lost
    # lease, and the takeover's entries all carry newer tokens
    entries = list(table.timeline_log.entries())
    tokens = [e.lock_token for e in entries]
    assert None not in tokens and paused_token not in tokens
    assert min(e.lock_token or 0 for e in entries if e.instant == mine.instant) > paused_token
