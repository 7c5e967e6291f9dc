"""A writer process for the heartbeat-monitor tests (run as a script, never collected).

    python writer_process.py hold  TABLE INSTANT INTERVAL_S MISSES        beat until killed
    python writer_process.py slow  TABLE INSTANT INTERVAL_S MISSES WORK_S  busy for WORK_S, end
    python writer_process.py write TABLE_ROOT INTERVAL_S MISSES            one instant, see below

Kafka comes from the environment (``LAKEWARDEN_KAFKA__*``). It prints ``ready`` once the first
beat was acknowledged, then one line per event the test waits for.

``write``: begin an instant on a local table, beat, print ``ready <instant>``, wait for a line
on stdin (the test stops the broker meanwhile): ``until lost`` waits until the writer's own
heartbeat judges itself lost, prints ``lost`` and waits for the next line; any other line runs
``WriteTransaction.complete``, whose coordinator hook (``check_heartbeat``) refuses when the
heartbeat was lost; print ``completed`` or ``refused <cause>`` and the instant's state.
"""

from __future__ import annotations

import sys
import time

from lakewarden.clients.heartbeat import Heartbeat, HeartbeatLostError, Heartbeats
from lakewarden.settings import Settings
from lakewarden.storage.local import LocalStorage
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.stats import CommitStats, WorkloadProfile
from lakewarden.table.timeline import Timeline
from lakewarden.table.transaction import WriteTransaction


def hold(table: str, instant: str, interval_s: float, misses: int) -> None:
    with Heartbeat(
        Settings(), table, instant, "writer", interval_s=interval_s, tolerable_misses=misses
    ):
        print("ready", flush=True)
        time.sleep(3600)


def slow(table: str, instant: str, interval_s: float, misses: int, work_s: float) -> None:
    with Heartbeat(
        Settings(), table, instant, "writer", interval_s=interval_s, tolerable_misses=misses
    ) as beat:
        print("ready", flush=True)
        deadline = time.monotonic() + work_s
        total = 0
        while time.monotonic() < deadline:  # CPU-bound Python: holds the GIL between switches
            total += sum(i * i for i in range(10_000))
        print(f"done healthy={beat.is_healthy()}", flush=True)


class _LocalLockKafkaHeartbeats(EmbeddedCoordinator):
    """The in-process lock (no lock service needed here) with Kafka heartbeats, judged at
    completion exactly as ``KafkaCoordinator.check_heartbeat`` does."""

    def __init__(self, beats: Heartbeats) -> None:
        super().__init__()
        self.beats = beats

    def check_heartbeat(self, table_id: str, instant: str) -> None:
        self.beats.check(table_id, instant)


def write(root: str, interval_s: float, misses: int) -> None:
    timeline = Timeline(LocalStorage(root), table="orders")
    beats = Heartbeats(Settings(), interval_s=interval_s, tolerable_misses=misses)
    txn = WriteTransaction.begin(
        timeline, _LocalLockKafkaHeartbeats(beats), "orders", operation="insert", actor="writer"
    )
    with beats.hold("orders", txn.instant, "writer") as beat:
        txn.inflight(WorkloadProfile(operation="insert", file_groups=()))
        print(f"ready {txn.instant}", flush=True)
        while sys.stdin.readline().strip() == "until lost":
            while beat.is_healthy():  # the broker is gone: no beat is acknowledged any more
                time.sleep(0.02)
            print("lost", flush=True)
        try:
            txn.complete(CommitStats(operation="insert", write_stats=()))
            print("completed", flush=True)
        except HeartbeatLostError as err:
            print(f"refused {err.cause} {type(err).__name__}", flush=True)
    state = txn.status()
    print(f"state {None if state is None else state.state}", flush=True)


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "hold":
        hold(args[0], args[1], float(args[2]), int(args[3]))
    elif mode == "slow":
        slow(args[0], args[1], float(args[2]), int(args[3]), float(args[4]))
    else:
        write(args[0], float(args[1]), int(args[2]))
