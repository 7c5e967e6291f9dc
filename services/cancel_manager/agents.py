"""cancel-manager's agents, declared at module top.

- ``serve_cancel_requests`` (concurrency 1): every ``CancelRequest`` through ``RequestHandler``;
- ``finish_dead_cancellations`` (concurrency 1): every ``HeartbeatExpired`` through
  ``ExpiryHandler`` (execute_cancel of a cancel-requested plan whose executor died).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

import faust

from lakewarden.events import Event
from lakewarden.table import Coordinator, connect
from services.cancel_manager.app import (
    SERVICE,
    app,
    cancel_pool,
    dead_letters,
    expired_topic,
    requests_topic,
    results_topic,
    settings,
    tables,
    timeline_topic,
)
from services.cancel_manager.handler import ExpiryHandler, RequestHandler
from services.cancel_manager.worker import CancelWorker


async def _blocking(func: Callable[[], Any]) -> Any:
    return await asyncio.get_running_loop().run_in_executor(cancel_pool, func)


async def _send_result(table_id: str, event: Event) -> None:
    await results_topic.send(key=table_id.encode(), value=event)


async def _send_transition(table_id: str, event: Event) -> None:
    await timeline_topic.send(key=table_id.encode(), value=event)


@functools.cache
def _coordinator() -> Coordinator:
    # timeline-lock's lease and heartbeat-monitor's liveness: Kafka or refuse. Built on the
    # first request, on the worker thread: no network IO at import.
    return connect(settings, require_kafka=True).coordinator


worker = CancelWorker(settings, _coordinator)
requests_handler = RequestHandler(
    worker=worker,
    run_blocking=_blocking,
    send_result=_send_result,
    send_transition=_send_transition,
    dead_letters=dead_letters,
    producer_id=SERVICE,
    registry=tables,
    persisted=tables.changelog_acked,
)
expiry_handler = ExpiryHandler(
    worker=worker,
    run_blocking=_blocking,
    send_transition=_send_transition,
    dead_letters=dead_letters,
    producer_id=SERVICE,
    registry=tables,
)


@app.agent(requests_topic, concurrency=1)
async def serve_cancel_requests(stream: faust.StreamT[Any]) -> None:
    """Apply every cancel request and answer it."""
    async for event in stream.events():
        await requests_handler.handle(event.message, event.value)


@app.agent(expired_topic, concurrency=1)
async def finish_dead_cancellations(stream: faust.StreamT[Any]) -> None:
    """Abort cancel-requested plans whose executor was declared dead."""
    async for event in stream.events():
        await expiry_handler.handle(event.message, event.value)
