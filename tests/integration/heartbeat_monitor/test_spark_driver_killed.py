"""A Spark write whose driver is killed (kill -9) after ``requested`` leaves an instant that
heartbeat-monitor declares dead, and the running cleaner rolls it back and deletes its files:
real broker, real timeline-lock, heartbeat-monitor and cleaner processes, a real Spark driver
process (``spark_driver_process.py``). Nobody registers the table with the cleaner: the driver's
coordinator does at its first announced entry. While the driver beats, the cleaner leaves the
instant alone; it is never completed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from hbtools import INTERVAL_S, MISSES, TOLERANCE_S, Expiries, env_for, wait_for_beats

from lakewarden.api.table import Table
from lakewarden.clients.liveness import Liveness
from lakewarden.devstack import processes
from lakewarden.events import ensure_topics
from lakewarden.settings import Settings
from lakewarden.table.coordinator import Liveness as Verdict
from lakewarden.table.instant import Action, Transition
from lakewarden.table.plans import RollbackPlan
from lakewarden.testing import wait_until
from lakewarden_services._common.process import ServiceProcess

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DRIVER = Path(__file__).with_name("spark_driver_process.py")
TOL_MS = round(TOLERANCE_S * 1000)
CLEANS = "lakewarden_cleaner_cleans_total"  # every outcome
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("region", pa.string()),
        ("ts", pa.int64()),
        ("amount", pa.float64()),
        ("note", pa.string()),
    ]
)


@pytest.fixture
def cleaner(hb_settings: Settings, lock_service: ServiceProcess, tmp_path: Path) -> ServiceProcess:
    """The cleaner, sweeping every second (started by the test, stopped here)."""
    env = {
        "LAKEWARDEN_CLEANER_SWEEP_INTERVAL_S": "1",
        "LAKEWARDEN_HEARTBEAT__INTERVAL_S": str(INTERVAL_S),
        "LAKEWARDEN_HEARTBEAT__TOLERABLE_MISSES": str(MISSES),
    }
    return ServiceProcess(
        "lakewarden_services.cleaner", hb_settings, home=tmp_path / "cleaner", extra_env=env
    )


@pytest.fixture
def lock_service(hb_settings: Settings, tmp_path: Path) -> Iterator[ServiceProcess]:
    ensure_topics(hb_settings)  # the lock's request and reply topics under the test's prefix
    service = ServiceProcess(
        "lakewarden_services.timeline_lock", hb_settings, home=tmp_path / "lock"
    )
    service.home.mkdir()
    service.start()
    try:
        yield service
    finally:
        service.stop()


def _group_alive(pgid: int) -> list[int]:
    """Pids still in process group ``pgid``."""
    alive = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    alive.append(int(entry))
            except ProcessLookupError:
                continue
    return alive


def _pending_instant(table: Table, driver: subprocess.Popen[bytes], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert driver.poll() is None, f"driver exited with {driver.returncode}"
        pending = [i for i in table.timeline() if i.is_pending]
        if pending:
            assert len(pending) == 1 and pending[0].state is Transition.REQUESTED
            return pending[0].instant
        time.sleep(0.2)
    raise AssertionError(f"no instant was requested within {timeout_s} s")


def _wait_for(
    view: Liveness, table_id: str, instant: str, verdict: Verdict, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while (status := view.status(table_id, instant)) is not verdict:
        assert time.monotonic() < deadline, f"{instant} is {status}, expected {verdict}"
        time.sleep(0.1)


def _job_files(table: Table) -> list[str]:
    """What a write leaves in the table: data files and the job's staging directory."""
    return [o.key for o in table.storage.list("") if not o.key.startswith(".lakewarden/")]


def _task_committed(table: Table) -> bool:
    return any("/manifests/" in key for key in _job_files(table))


def test_killed_spark_driver_is_declared_dead_and_rolled_back_by_the_cleaner(
    monitor: ServiceProcess,
    lock_service: ServiceProcess,
    cleaner: ServiceProcess,
    hb_settings: Settings,
    expiries: Expiries,
    tmp_path: Path,
) -> None:
    root = tmp_path / "table"
    table = Table.create(str(root), name="orders", record_key="id", schema=SCHEMA, buckets=2)
    env = {
        **env_for(hb_settings),
        "LAKEWARDEN_HEARTBEAT__INTERVAL_S": str(INTERVAL_S),
        "LAKEWARDEN_HEARTBEAT__TOLERABLE_MISSES": str(MISSES),
    }
    with (tmp_path / "driver.log").open("wb") as log:
        driver = subprocess.Popen(
            [sys.executable, str(DRIVER), str(root)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    cleaner.home.mkdir()
    try:
        cleaner.start()  # while Spark starts
        instant = _pending_instant(table, driver, timeout_s=120)
        # Partition 0's files are staged and its task committed; partition 1 sleeps.
        wait_until(lambda: _task_committed(table), 60, "partition 0's task commit")
        staged = _job_files(table)

        def rolled_back() -> bool:
            mine = table.state().get(instant)
            return mine is not None and mine.state is Transition.ROLLED_BACK

        with Liveness(hb_settings) as view:
            # Its beats arrive: the verdict to come is the kill's doing.
            _wait_for(view, table.table_id, instant, Verdict.ALIVE, timeout_s=30)
            # Two tolerance windows of the monitor's time (a beat stamped after them), then
            # two whole cleans of the table by the sweeping cleaner: none touches a live write.
            after_ms = time.time_ns() // 1_000_000 + 2 * TOL_MS
            wait_for_beats(hb_settings, instant, 1, stamped_from_ms=after_ms)
            cleans = cleaner.metric(CLEANS)
            wait_until(lambda: cleaner.metric(CLEANS) >= cleans + 2, 60, "two cleans after them")
            assert view.status(table.table_id, instant) is Verdict.ALIVE
            alive = table.state().get(instant)
            assert alive is not None and alive.state is Transition.REQUESTED  # a live write
            assert set(staged) <= set(_job_files(table))  # and its files are left alone
            killed_ms = time.time_ns() // 1_000_000
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait(10)

            expired = expiries.wait_for(instant, timeout_s=15)
            assert expired["owner"].startswith("spark-writer@")
            assert expired["tolerance_ms"] == TOL_MS
            assert expired["envelope"]["table_id"] == table.table_id
            # never before the tolerance (how soon after it: the heartbeat benchmark)
            assert TOL_MS < expired["detected_ms"] - expired["last_seen_ms"]
            assert expired["detected_ms"] > killed_ms
            # Dead in the monitor's view, until the cleaner's rollback makes it forget the
            # instant (the cleaner may be that quick).
            wait_until(
                lambda: view.status(table.table_id, instant) is Verdict.DEAD or rolled_back(),
                30,
                "the monitor's verdict: dead",
            )

        wait_until(rolled_back, 60, "the cleaner to roll the dead instant back")
        wait_until(lambda: not _job_files(table), 60, "the dead write's files to be deleted")
        mine = table.state().get(instant)
        assert mine is not None and mine.failed_stage == "cleaner_rollback"
        # The intent first: a rollback instant naming the target, appended after the expiry.
        intent = table.state().get(mine.rollback_by or "")
        assert intent is not None and intent.action is Action.ROLLBACK
        assert isinstance(intent.plan, RollbackPlan) and intent.plan.target == instant
        entries = list(table.timeline_log.entries())
        (requested,) = [
            e
            for e in entries
            if e.instant == intent.instant and e.transition is Transition.REQUESTED
        ]
        assert requested.wall_time_ms >= expired["detected_ms"]
        assert [e.transition for e in entries if e.instant == instant] == [
            Transition.REQUESTED,
            Transition.ROLLED_BACK,
        ]
        # Nothing was committed (the rollback's own instant may already have completed).
        committed = [i for i in table.timeline() if i.state is Transition.COMPLETED]
        assert not [i for i in committed if i.action is not Action.ROLLBACK]
        # the JVM and the Python workers died with the driver
        assert processes.wait_for(lambda: not _group_alive(driver.pid), timeout_s=10)
    finally:
        if _group_alive(driver.pid):
            os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(10)
        cleaner.stop()
