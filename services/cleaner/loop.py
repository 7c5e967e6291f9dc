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

from lakewarden.events.topics import CLEAN_REQUESTS, HEARTBEAT_EXPIRED, TIMELINE
from lakewarden_services._common.table_loop import TableService
from lakewarden_services.cleaner.app import SERVICE, TABLES_CHANGELOG, TOPICS
from lakewarden_services.cleaner.handler import EventHandler

__all__ = ["CLEANER"]

CLEANER = TableService(
    name=SERVICE,
    # What each followed topic means to the handler; the registrations topic first.
    sources=((CLEAN_REQUESTS, "request"), (TIMELINE, "transition"), (HEARTBEAT_EXPIRED, "expired")),
    changelog=TABLES_CHANGELOG,
    topics=TOPICS,
    handler=EventHandler,
    work="clean",
)
