"""The cleaner's runtime: ``_common.table_loop``'s ``TableLoop`` over ``clean.requests``
(registrations), ``timeline`` and ``heartbeat.expired``, and one clean thread
(``WorkPool``): a clean blocks on storage and the table lock, and one at a time per instance
keeps an instance's load on the store and on timeline-lock bounded (instances scale out).

A table is cleaned only by the instance that owns it, except around a rebalance (a clean
already running when its partition is revoked finishes; the queued tables of revoked
partitions are dropped and their new owner queues them, ``EventHandler.follow_assignment``):
the table lock and the clean instant make an overlap safe.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from lakewarden.events.topics import CLEAN_REQUESTS, HEARTBEAT_EXPIRED, TIMELINE
from lakewarden.settings import Settings
from lakewarden_services._common.dlq import DeadLetterSink
from lakewarden_services._common.registry import TablesRegistry
from lakewarden_services._common.table_loop import TableLoop
from lakewarden_services.cleaner.app import SERVICE, TABLES_CHANGELOG
from lakewarden_services.cleaner.handler import EventHandler
from lakewarden_services.cleaner.queue import CleanQueue

__all__ = ["SOURCES", "build_loop"]

# What each followed topic means to the handler; the registrations topic first.
SOURCES = ((CLEAN_REQUESTS, "request"), (TIMELINE, "transition"), (HEARTBEAT_EXPIRED, "expired"))


def build_loop(
    settings: Settings,
    queue: CleanQueue,
    *,
    group_id: str,
    group_instance_id: str | None,
    commit_interval_s: float,
    sweep_interval_s: float,
    wake: Callable[[], None],
) -> TableLoop:
    """The cleaner's Kafka loop, queueing tables on ``queue`` (``wake`` when it did)."""

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
