"""The publisher's runtime: ``_common.table_loop``'s ``TableLoop`` over ``clean.requests``
(registrations) and ``timeline``, and ``LAKEWARDEN_PUBLISHER_CONCURRENCY`` sync threads
(``WorkPool``): a sync mostly waits on storage, so syncs of different tables overlap, and the
queue hands a table to one thread at a time. A finished sync wakes the pool, so a freed thread
takes the next waiting table without a new event.
"""

from __future__ import annotations

from lakewarden.events.topics import CLEAN_REQUESTS, TIMELINE
from lakewarden_services._common.table_loop import TableService
from lakewarden_services.publisher.app import SERVICE, TABLES_CHANGELOG, TOPICS
from lakewarden_services.publisher.handler import EventHandler

__all__ = ["PUBLISHER"]

PUBLISHER = TableService(
    name=SERVICE,
    # What each followed topic means to the handler; the registrations topic first.
    sources=((CLEAN_REQUESTS, "registration"), (TIMELINE, "transition")),
    changelog=TABLES_CHANGELOG,
    topics=TOPICS,
    handler=EventHandler,
    work="publish",
)
