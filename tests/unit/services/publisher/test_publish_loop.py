"""The publisher's publish loop, driven without faust: it syncs every queued table, at most
``concurrency`` at once, and a slot freed by a finished sync is used without a new event."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

from lakewarden_services.publisher.handler import PublishQueue, Work
from lakewarden_services.publisher.loop import PublishLoop


def test_every_queued_table_is_synced_with_one_slot_and_no_further_event() -> None:
    queue = PublishQueue()
    for i in range(5):
        queue.add(f"t{i}", f"/tables/t{i}", float(i))
    synced: list[str] = []
    done = asyncio.Event()
    loop_ref: list[asyncio.AbstractEventLoop] = []

    def sync(work: Work) -> None:
        synced.append(work.table_id)
        if len(synced) == 5:
            loop_ref[0].call_soon_threadsafe(done.set)

    with ThreadPoolExecutor(1) as pool:
        publish = PublishLoop(queue, sync, pool, concurrency=1)

        async def main() -> None:
            loop_ref.append(asyncio.get_running_loop())
            task = asyncio.create_task(publish.run())
            try:
                await asyncio.wait_for(done.wait(), 10)
            finally:
                task.cancel()

        asyncio.run(main())
    assert synced == ["t0", "t1", "t2", "t3", "t4"]


def test_at_most_concurrency_syncs_at_once_and_never_one_table_twice() -> None:
    queue = PublishQueue()
    for i in range(12):
        queue.add(f"t{i}", f"/tables/t{i}", float(i))
    guard = threading.Lock()
    now = {"running": 0, "peak": 0}
    synced: list[str] = []
    done = asyncio.Event()
    loop_ref: list[asyncio.AbstractEventLoop] = []
    release = threading.Event()

    def sync(work: Work) -> None:
        with guard:
            now["running"] += 1
            now["peak"] = max(now["peak"], now["running"])
            if now["peak"] == 3:
                release.set()
        release.wait(5)  # the first syncs wait until three run at once
        with guard:
            now["running"] -= 1
            synced.append(work.table_id)
            if len(synced) == 12:
                loop_ref[0].call_soon_threadsafe(done.set)

    with ThreadPoolExecutor(8) as pool:
        publish = PublishLoop(queue, sync, pool, concurrency=3)

        async def main() -> None:
            loop_ref.append(asyncio.get_running_loop())
            task = asyncio.create_task(publish.run())
            try:
                await asyncio.wait_for(done.wait(), 10)
            finally:
                task.cancel()

        asyncio.run(main())
    assert now["peak"] == 3
    assert sorted(synced) == sorted(f"t{i}" for i in range(12))
