"""The cleaner's agents, timers and clean loop, declared at module top.

- one agent per topic (concurrency 1): every event through ``EventHandler``;
- ``sweep_owned_tables`` (timer): queue every table of the owned partitions;
- ``report`` (timer, 1 s): the tables-owned and lag gauges;
- ``clean_loop`` (task): take tables off the queue, clean each on the worker thread.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import Any

import faust

from lakewarden.table import Coordinator, connect
from lakewarden_services.cleaner import metrics
from lakewarden_services.cleaner.app import (
    app,
    clean_pool,
    cleaner_settings,
    dead_letters,
    expired_topic,
    queue,
    requests_topic,
    service_settings,
    settings,
    tables,
    timeline_topic,
)
from lakewarden_services.cleaner.handler import EventHandler
from lakewarden_services.cleaner.worker import CleanWorker

log = logging.getLogger(__name__)

_wakeup: asyncio.Event | None = None


def _wake() -> None:
    if _wakeup is not None:
        _wakeup.set()


@functools.cache
def _coordinator() -> Coordinator:
    # The table lock is timeline-lock's lease, liveness heartbeat-monitor's: Kafka or refuse.
    # Built on the first clean, on the worker thread: no network IO at import.
    return connect(settings, require_kafka=True).coordinator


handler = EventHandler(
    registry=tables,
    queue=queue,
    dead_letters=dead_letters,
    wake=_wake,
    persisted=tables.changelog_acked,
)
worker = CleanWorker(
    settings, _coordinator, cleaner_settings, instance=service_settings.instance_id or "0"
)


def _owned_partitions() -> set[int]:
    topic = requests_topic.get_topic_name()
    return {tp.partition for tp in app.assignor.assigned_actives() if tp.topic == topic}


@app.agent(requests_topic, concurrency=1)
async def serve_clean_requests(stream: faust.StreamT[Any]) -> None:
    """Register and clean the tables asked for."""
    async for event in stream.events():
        await handler.handle(event.message, event.value, source="request")


@app.agent(timeline_topic, concurrency=1)
async def follow_timeline(stream: faust.StreamT[Any]) -> None:
    """Clean tables after transitions that leave garbage."""
    async for event in stream.events():
        await handler.handle(event.message, event.value, source="transition")


@app.agent(expired_topic, concurrency=1)
async def follow_expired_heartbeats(stream: faust.StreamT[Any]) -> None:
    """Roll back the writes whose heartbeat expired."""
    async for event in stream.events():
        await handler.handle(event.message, event.value, source="expired")


async def sweep_owned_tables() -> None:
    """Queue every table this instance owns."""
    handler.sweep(_owned_partitions())


async def report() -> None:
    """The gauges: tables owned, lag, tables queued."""
    metrics.TABLES_OWNED.set(len(handler.owned(_owned_partitions())))
    metrics.LAG.set(queue.oldest_age(time.monotonic()))
    metrics.QUEUED.set(len(queue))


async def clean_loop() -> None:
    """Clean the queued tables one at a time, off the event loop."""
    global _wakeup
    _wakeup = asyncio.Event()
    loop = asyncio.get_running_loop()
    while True:
        work = queue.take()
        if work is None:
            await _wakeup.wait()
            _wakeup.clear()
            continue
        try:
            await loop.run_in_executor(clean_pool, worker.clean, work)
        except Exception:
            log.exception("cleaning table %s failed; it is cleaned again later", work.table_id)
        finally:
            queue.done(work.table_id)


# Registered without decorator syntax: faust's decorators are untyped (mypy strict).
app.timer(interval=cleaner_settings.sweep_interval_s)(sweep_owned_tables)
app.timer(interval=1.0)(report)
app.task(clean_loop)
