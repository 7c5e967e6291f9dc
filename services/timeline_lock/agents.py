"""timeline-lock's agent and timer, declared at module top.

- ``serve_lock_requests`` (concurrency 1): every request, in partition order, through
  ``RequestHandler`` (handlers are idempotent: a redelivered request is skipped by offset);
- ``expire_overdue_leases`` (every ``EXPIRY_TICK_S``): ``ExpiryScanner`` sends an ``expire``
  request for each lease past its conservative expiry.
"""

from __future__ import annotations

from typing import Any

import faust

from lakewarden.clients import table_partition
from lakewarden.events import Event
from lakewarden.events.topics import LOCK_REPLIES, LOCK_REQUESTS
from services.timeline_lock.app import (
    SERVICE,
    app,
    dead_letters,
    lifecycle,
    locks,
    replies_topic,
    requests_topic,
)
from services.timeline_lock.handler import ExpiryScanner, RequestHandler, reply_event
from services.timeline_lock.state import Reply

# Expiry is seen at most this late (plus a Kafka round trip); the issue asks for ttl + 1 s.
EXPIRY_TICK_S = 0.25


def _partitions() -> int:
    return app.consumer.topic_partitions(requests_topic.get_topic_name()) or (
        LOCK_REQUESTS.partitions
    )


def _reply_partitions() -> int:
    return app.consumer.topic_partitions(replies_topic.get_topic_name()) or (
        LOCK_REPLIES.partitions
    )


async def _send_reply(table_id: str, reply: Reply) -> None:
    key = (reply.route.key or table_id).encode()
    value = reply_event(reply, table_id=table_id, producer_id=SERVICE)
    await replies_topic.send(key=key, value=value, partition=reply.route.partition)


async def _send_request(table_id: str, record: dict[str, Any]) -> None:
    partition = table_partition(table_id, _partitions())
    value = Event("LockRequest", record)
    await requests_topic.send(key=table_id.encode(), value=value, partition=partition)


handler = RequestHandler(
    table=locks,
    send_reply=_send_reply,
    dead_letters=dead_letters,
    reply_topic=replies_topic.get_topic_name(),
    partitions=_partitions,
    reply_partitions=_reply_partitions,
)
scanner = ExpiryScanner(
    table=locks,
    send_request=_send_request,
    owned_since=lambda: lifecycle.assigned_at_ms,
    producer_id=SERVICE,
)


@app.agent(requests_topic, concurrency=1)
async def serve_lock_requests(stream: faust.StreamT[Any]) -> None:
    """Apply every lock request to its table's lock and answer it."""
    async for event in stream.events():
        await handler.handle(event.message, event.value)


async def expire_overdue_leases() -> None:
    """Ask the agent to expire leases that were not renewed in time."""
    if lifecycle.ready:
        await scanner.tick()


# Registered by calling the decorator: faust's ``timer`` is untyped, and applying it with ``@``
# would make the function untyped for mypy --strict.
app.timer(interval=EXPIRY_TICK_S)(expire_overdue_leases)
