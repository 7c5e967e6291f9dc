"""The publisher's sync threads (``WorkPool`` over ``PublishQueue``), driven without Kafka:
every queued table is synced, at most ``concurrency`` at once and never one table twice at
once, and a thread freed by a finished sync takes the next table without a new event."""

from __future__ import annotations

import threading

from lakewarden_services._common.table_loop import WorkPool
from lakewarden_services.publisher.handler import PublishQueue, Work


def _run(pool: WorkPool, until: threading.Event) -> None:
    stop = threading.Event()
    threads = pool.start(stop)
    try:
        assert until.wait(10)
    finally:
        stop.set()
        pool.wake()
        for thread in threads:
            thread.join(5)


def test_every_queued_table_is_synced_with_one_thread_and_no_further_event() -> None:
    queue = PublishQueue()
    for i in range(5):
        queue.add(f"t{i}", f"/tables/t{i}", float(i))
    synced: list[str] = []
    done = threading.Event()

    def sync(work: Work) -> None:
        synced.append(work.table_id)
        if len(synced) == 5:
            done.set()

    _run(WorkPool(queue, sync, threads=1, name="publish"), done)
    assert synced == ["t0", "t1", "t2", "t3", "t4"]


def test_at_most_concurrency_syncs_at_once_and_never_one_table_twice() -> None:
    queue = PublishQueue()
    for i in range(12):
        queue.add(f"t{i}", f"/tables/t{i}", float(i))
    guard = threading.Lock()
    now = {"running": 0, "peak": 0}
    running: set[str] = set()
    twice: list[str] = []
    synced: list[str] = []
    done = threading.Event()
    release = threading.Event()

    def sync(work: Work) -> None:
        with guard:
            if work.table_id in running:
                twice.append(work.table_id)
            running.add(work.table_id)
            now["running"] += 1
            now["peak"] = max(now["peak"], now["running"])
            if now["peak"] == 3:
                release.set()
            if len(synced) < 6:
                queue.add(work.table_id, f"/tables/{work.table_id}", 99.0)  # queued again
        release.wait(5)  # the first syncs wait until three run at once
        with guard:
            now["running"] -= 1
            running.discard(work.table_id)
            synced.append(work.table_id)
            if set(synced) == {f"t{i}" for i in range(12)} and len(synced) >= 18:
                done.set()

    _run(WorkPool(queue, sync, threads=3, name="publish"), done)
    assert now["peak"] == 3 and twice == []
    assert set(synced) == {f"t{i}" for i in range(12)}
