"""The publisher's agents, timers and publish loop, declared at module top.

- one agent per topic (concurrency 1): every event through ``EventHandler``;
- ``sweep_owned_tables`` (timer): queue every table of the owned partitions;
- ``report`` (timer, 1 s): the tables-owned, queued and lag gauges;
- ``publish_loop`` (task): ``PublishLoop``, which takes tables off the queue and syncs each
  on the worker pool, up to ``LAKEWARDEN_PUBLISHER_CONCURRENCY`` tables at once.
"""

from __future__ import annotations

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
from lakewarden_services.publisher.handler import EventHandler
from lakewarden_services.publisher.loop import PublishLoop
from lakewarden_services.publisher.worker import PublishWorker

worker = PublishWorker(settings)
publisher_loop = PublishLoop(
    queue, worker.sync, publish_pool, concurrency=publisher_settings.concurrency
)
handler = EventHandler(
    registry=tables,
    queue=queue,
    dead_letters=dead_letters,
    wake=publisher_loop.wake,
    persisted=tables.changelog_acked,
)


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
    """Publish the queued tables off the event loop, up to ``concurrency`` at once."""
    await publisher_loop.run()


# Registered without decorator syntax: faust's decorators are untyped (mypy strict).
app.timer(interval=publisher_settings.sweep_interval_s)(sweep_owned_tables)
app.timer(interval=1.0)(report)
app.task(publish_loop)
