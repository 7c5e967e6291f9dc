"""The per-instance queue of tables to clean: one entry per table, triggered work first.

Triggers for a table already queued merge into its entry (the dead instants add up, an explicit
request's policy wins), so a burst of timeline events costs one clean. A table being cleaned is
not handed out again until ``done``: an instance never cleans one table twice at once.

Two classes of entry, each oldest first: **triggered** (a request, a transition, a dead
instant: there is work) and **swept** (only the periodic sweep or a gained partition queued it:
there may be work no event announced). ``take`` hands out triggered entries before swept ones,
so a sweep of hundreds of tables (which may take longer than the sweep interval when cleans are
slow) never holds up a table an event asked for; a trigger for a swept entry promotes it. Swept
entries are cleaned when no triggered one waits: an instance that is never idle sweeps later
than its interval, never more often.

``retain`` drops the waiting entries of tables the instance no longer owns (their new owner
queues them: ``EventHandler.report``). The Kafka loop adds and the clean threads take, so
every method holds the queue's lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from lakewarden_services.cleaner.protocol import Trigger


@dataclass
class Work:
    """One table's pending clean."""

    table_id: str
    table_uri: str
    queued_at: float
    dead: set[str] = field(default_factory=set)
    policy: str | None = None
    delete_orphans: bool = False
    why: list[str] = field(default_factory=list)

    def merge(self, trigger: Trigger, table_uri: str) -> None:
        self.table_uri = table_uri
        self.dead.update(trigger.dead)
        self.policy = trigger.policy or self.policy
        self.delete_orphans = self.delete_orphans or trigger.delete_orphans
        self.why.append(trigger.why)


class CleanQueue:
    """Tables waiting to be cleaned: triggered ones first, each class in the order its
    tables were first queued."""

    def __init__(self) -> None:
        self._triggered: dict[str, Work] = {}
        self._swept: dict[str, Work] = {}
        self._running: set[str] = set()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._triggered) + len(self._swept)

    def add(self, trigger: Trigger, table_uri: str, now: float, *, swept: bool = False) -> None:
        """Queue ``trigger``'s table (merged into its waiting entry, if any); ``swept``: only
        a sweep asks (the entry waits behind every triggered one)."""
        with self._lock:
            work = self._triggered.get(trigger.table_id)
            if work is None:
                work = self._swept.get(trigger.table_id)
                if work is not None and not swept:  # promoted: there is work
                    del self._swept[trigger.table_id]
                    self._triggered[trigger.table_id] = work
            if work is None:
                work = Work(trigger.table_id, table_uri, now)
                (self._swept if swept else self._triggered)[trigger.table_id] = work
            work.merge(trigger, table_uri)

    def take(self) -> Work | None:
        """The oldest waiting triggered table that is not being cleaned, else the oldest
        swept one (it is then running)."""
        with self._lock:
            for waiting in (self._triggered, self._swept):
                for table_id, work in waiting.items():
                    if table_id not in self._running:
                        del waiting[table_id]
                        self._running.add(table_id)
                        return work
        return None

    def done(self, table_id: str) -> None:
        with self._lock:
            self._running.discard(table_id)

    def retain(self, keep: Callable[[str], bool]) -> int:
        """Drop the waiting entries of the tables ``keep`` rejects; how many were dropped
        (a clean already running finishes)."""
        with self._lock:
            dropped = 0
            for waiting in (self._triggered, self._swept):
                for table_id in [t for t in waiting if not keep(t)]:
                    del waiting[table_id]
                    dropped += 1
            return dropped

    def oldest_age(self, now: float) -> float:
        """How long the oldest waiting table has waited (the lag metric)."""
        with self._lock:
            waiting = [*self._triggered.values(), *self._swept.values()]
            return max((now - w.queued_at for w in waiting), default=0.0)
