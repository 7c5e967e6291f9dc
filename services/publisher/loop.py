"""The publish loop apart from faust (so tests drive it): take tables off the queue and sync
each on a thread pool, up to ``concurrency`` at once.

A slot is freed before the loop is woken: the loop waits for a slot, then for work, and a
finished sync both frees its slot and wakes it (its table may have been queued again while
it ran, which ``PublishQueue.take`` skips until ``done``). Runs on the event loop only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import Executor

from lakewarden_services.publisher.handler import PublishQueue, Work

log = logging.getLogger(__name__)


class PublishLoop:
    """Runs ``sync`` for queued tables on ``pool``, at most ``concurrency`` at once."""

    def __init__(
        self,
        queue: PublishQueue,
        sync: Callable[[Work], object],
        pool: Executor,
        *,
        concurrency: int,
    ) -> None:
        self.queue = queue
        self.sync = sync
        self.pool = pool
        self.concurrency = concurrency
        self._wakeup: asyncio.Event | None = None
        self._running: set[asyncio.Task[None]] = set()  # referenced until done

    def wake(self) -> None:
        """Tell the loop that work may be waiting (safe before ``run`` starts)."""
        if self._wakeup is not None:
            self._wakeup.set()

    async def run(self) -> None:
        """Forever: wait for a free slot, take a table, sync it in the background."""
        self._wakeup = asyncio.Event()
        slots = asyncio.Semaphore(self.concurrency)
        while True:
            await slots.acquire()
            work = self.queue.take()
            if work is None:
                slots.release()
                await self._wakeup.wait()
                self._wakeup.clear()
                continue
            task = asyncio.create_task(self._publish(work, slots))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _publish(self, work: Work, slots: asyncio.Semaphore) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(self.pool, self.sync, work)
        except Exception:
            log.exception("publishing table %s failed; it is published again later", work.table_id)
        finally:
            self.queue.done(work.table_id)
            slots.release()
            self.wake()
