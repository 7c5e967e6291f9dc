"""The publisher's agents, timers and publish loop, declared at module top.

- one agent per topic (concurrency 1): every event through ``EventHandler``;
- ``sweep_owned_tables`` (timer): queue every table of the owned partitions;
- ``report`` (timer, 1 s): the tables-owned, queued and lag gauges;
- ``publish_loop`` (task): take tables off the queue, sync each on the worker pool, up to
  ``LAKEWARDEN_PUBLISHER_CONCURRENCY`` tables at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import faust

from lakewarden_services.publisher import metrics
from lakewarden_services.publisher.app import (
    app,
    dead_letters,
    publish_pool,
    publisher_settings,
    queue,
    registrations_topic,
    settings,
    tables,
    timeline_topic,
)
from lakewarden_services.publisher.handler import EventHandler, Work
from lakewarden_services.publisher.worker import PublishWorker

log = logging.getLogger(__name__)

_wakeup: asyncio.Event | None = None


def _wake() -> None:
    if _wakeup is not None:
        _wakeup.set()


handler = EventHandler(
    registry=tables,
    queue=queue,
    dead_letters=dead_letters,
    wake=_wake,
    persisted=tables.changelog_acked,
)
worker = PublishWorker(settings)


def _owned_partitions() -> set[int]:
    topic = registrations_topic.get_topic_name()
    return {tp.partition for tp in app.assignor.assigned_actives() if tp.topic == topic}


@app.agent(registrations_topic, concurrency=1)
async def follow_registrations(stream: faust.StreamT[Any]) -> None:
    """Learn where tables live."""
    async for event in stream.events():
        await handler.handle(event.message, event.value, source="registration")


@app.agent(timeline_topic, concurrency=1)
async def follow_timeline(stream: faust.StreamT[Any]) -> None:
    """Publish tables after each completed instant."""
    async for event in stream.events():
        await handler.handle(event.message, event.value, source="transition")


async def sweep_owned_tables() -> None:
    """Queue every table this instance owns."""
    handler.sweep(_owned_partitions())


async def report() -> None:
    """The gauges: tables owned, queued, lag."""
    metrics.TABLES_OWNED.set(len(handler.owned(_owned_partitions())))
    metrics.LAG.set(queue.oldest_age(time.monotonic()))
    metrics.QUEUED.set(len(queue))


async def publish_loop() -> None:
    """Publish the queued tables off the event loop, up to ``concurrency`` at once (the
    queue hands a table out again only once its sync is done)."""
    global _wakeup
    _wakeup = asyncio.Event()
    slots = asyncio.Semaphore(publisher_settings.concurrency)
    running: set[asyncio.Task[None]] = set()  # referenced until done
    while True:
        await slots.acquire()
        work = queue.take()
        if work is None:
            slots.release()
            await _wakeup.wait()
            _wakeup.clear()
            continue
        task = asyncio.create_task(_publish(work, slots))
        running.add(task)
        task.add_done_callback(running.discard)


async def _publish(work: Work, slots: asyncio.Semaphore) -> None:
    """Sync one table on the pool; then free its slot and wake the loop (the table may have
    been queued again meanwhile)."""
    try:
        await asyncio.get_running_loop().run_in_executor(publish_pool, worker.sync, work)
    except Exception:
        log.exception("publishing table %s failed; it is published again later", work.table_id)
    finally:
        queue.done(work.table_id)
        slots.release()
        _wake()


# Registered without decorator syntax: faust's decorators are untyped (mypy strict).
app.timer(interval=publisher_settings.sweep_interval_s)(sweep_owned_tables)
app.timer(interval=1.0)(report)
app.task(publish_loop)
