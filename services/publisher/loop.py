"""The publisher's runtime: ``_common.table_loop``'s ``TableLoop`` over ``clean.requests``
(registrations) and ``timeline``, and ``LAKEWARDEN_PUBLISHER_CONCURRENCY`` sync threads
(``WorkPool``): a sync mostly waits on storage, so syncs of different tables overlap, and the
queue hands a table to one thread at a time. A finished sync wakes the pool, so a freed thread
takes the next waiting table without a new event.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from lakewarden.events.topics import CLEAN_REQUESTS, TIMELINE
from lakewarden.settings import Settings
from lakewarden_services._common.dlq import DeadLetterSink
from lakewarden_services._common.registry import TablesRegistry
from lakewarden_services._common.table_loop import TableLoop
from lakewarden_services.publisher.app import SERVICE, TABLES_CHANGELOG
from lakewarden_services.publisher.handler import EventHandler, PublishQueue

__all__ = ["SOURCES", "build_loop"]

# What each followed topic means to the handler; the registrations topic first.
SOURCES = ((CLEAN_REQUESTS, "registration"), (TIMELINE, "transition"))


def build_loop(
    settings: Settings,
    queue: PublishQueue,
    *,
    group_id: str,
    group_instance_id: str | None,
    commit_interval_s: float,
    sweep_interval_s: float,
    wake: Callable[[], None],
) -> TableLoop:
    """The publisher's Kafka loop, queueing tables on ``queue`` (``wake`` when it did)."""

    def make_handler(
        registry: TablesRegistry,
        dead_letters: DeadLetterSink,
        persisted: Callable[[], Awaitable[None]],
    ) -> EventHandler:
        return EventHandler(
            registry=registry,
            queue=queue,
            dead_letters=dead_letters,
            wake=wake,
            persisted=persisted,
        )

    return TableLoop(
        settings,
        service=SERVICE,
        sources=SOURCES,
        changelog=TABLES_CHANGELOG,
        make_handler=make_handler,
        group_id=group_id,
        group_instance_id=group_instance_id,
        commit_interval_s=commit_interval_s,
        sweep_interval_s=sweep_interval_s,
    )
