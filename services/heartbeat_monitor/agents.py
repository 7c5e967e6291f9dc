"""heartbeat-monitor's agents, timer and rebalance hooks, declared at module top.

- ``track_heartbeats`` (concurrency 1): every message of ``heartbeats``, in partition order,
  through ``Monitor.on_heartbeat`` (verdicts, expiries, liveness records);
- ``forget_finished`` (concurrency 1): terminal ``timeline`` transitions make instants forgotten;
- ``send_ticks`` (every ``settings.heartbeat.monitor_tick_s``): one tick per partition of
  ``heartbeats``, so every partition's broker-time clock advances even when nobody beats.
"""

from __future__ import annotations

from functools import partial
from typing import Any, cast

import faust
from faust.types import TP
from mode import BaseSignalT

from lakewarden.events import Event
from lakewarden.events.topics import HEARTBEAT_EXPIRED, HEARTBEATS
from services.heartbeat_monitor import metrics
from services.heartbeat_monitor.app import (
    app,
    dead_letters,
    expired_topic,
    heartbeats_topic,
    instance_id,
    liveness,
    settings,
    timeline_topic,
    tracker,
)
from services.heartbeat_monitor.monitor import Monitor, wall_clock_ms
from services.heartbeat_monitor.tracker import Expiry


async def _send_expired(expiry: Expiry, record: dict[str, Any]) -> Any:
    partitions = app.consumer.topic_partitions(expired_topic.get_topic_name())
    # The partition of the heartbeats it expires: consumers co-partitioned with heartbeats
    # (and timeline) see a table's expiries where they see its other events.
    partition = expiry.partition % (partitions or HEARTBEAT_EXPIRED.partitions)
    return await expired_topic.send(
        key=expiry.table_id.encode(),
        value=Event("HeartbeatExpired", record),
        partition=partition,
    )


monitor = Monitor(
    tracker=tracker,
    table=liveness,
    send_expired=_send_expired,
    dead_letters=dead_letters,
    producer_id=instance_id,
)


@app.agent(heartbeats_topic, concurrency=1)
async def track_heartbeats(stream: faust.StreamT[Any]) -> None:
    """Judge every instant by the beats and ticks of its partition."""
    async for event in stream.events():
        await monitor.on_heartbeat(event.message, event.value)


@app.agent(timeline_topic, concurrency=1)
async def forget_finished(stream: faust.StreamT[Any]) -> None:
    """Forget instants that reached a terminal state."""
    async for event in stream.events():
        await monitor.on_timeline(event.message, event.value)


async def send_ticks() -> None:
    """Stamp every partition of ``heartbeats`` with broker time."""
    partitions = app.consumer.topic_partitions(heartbeats_topic.get_topic_name())
    for partition in range(partitions or HEARTBEATS.partitions):
        await heartbeats_topic.send(key=b"", value=monitor.tick_record(), partition=partition)


def _consumer_lag_s() -> float:
    last = monitor.last_broker_ms
    return 0.0 if last is None else max(wall_clock_ms() - last, 0) / 1000


def _heartbeat_partitions(tps: Any) -> list[int]:
    name = heartbeats_topic.get_topic_name()
    return sorted(tp.partition for tp in cast(set[TP], tps) if tp.topic == name)


def _on_revoked(sender: Any, revoked: Any, *, signal: BaseSignalT[Any], **kw: Any) -> None:
    monitor.revoked(_heartbeat_partitions(revoked))


def _on_assigned(sender: Any, assigned: Any, *, signal: BaseSignalT[Any], **kw: Any) -> None:
    monitor.assigned(_heartbeat_partitions(assigned))


# Gauges are read at scrape time (on the health server's thread: plain reads only).
for _status in ("alive", "dead", "ended"):
    metrics.INSTANTS.labels(_status).set_function(partial(tracker.counts.__getitem__, _status))
metrics.IN_GRACE.set_function(tracker.partitions_in_grace)
metrics.CONSUMER_LAG.set_function(_consumer_lag_s)

# Registered by calling: faust's ``timer`` and mode's signals are untyped for mypy --strict.
app.timer(interval=settings.heartbeat.monitor_tick_s)(send_ticks)
app.on_partitions_revoked.connect(cast(Any, _on_revoked))
app.on_partitions_assigned.connect(cast(Any, _on_assigned))
