"""The per-instance queue of tables to clean: one entry per table, oldest first.

Triggers for a table already queued merge into its entry (the dead instants add up, an explicit
request's policy wins), so a burst of timeline events costs one clean. A table being cleaned is
not handed out again until ``done``: an instance never cleans one table twice at once. The
Kafka loop adds and the clean thread takes, so every method holds the queue's lock.
"""

from __future__ import annotations

import threading
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


class CleanQueue:
    """Tables waiting to be cleaned, in the order they were first queued."""

    def __init__(self) -> None:
        self._waiting: dict[str, Work] = {}
        self._running: set[str] = set()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._waiting)

    def add(self, trigger: Trigger, table_uri: str, now: float) -> None:
        with self._lock:
            work = self._waiting.get(trigger.table_id)
            if work is None:
                work = self._waiting[trigger.table_id] = Work(trigger.table_id, table_uri, now)
            work.table_uri = table_uri
            work.dead.update(trigger.dead)
            work.policy = trigger.policy or work.policy
            work.delete_orphans = work.delete_orphans or trigger.delete_orphans
            work.why.append(trigger.why)

    def take(self) -> Work | None:
        """The oldest waiting table that is not being cleaned (it is then running)."""
        with self._lock:
            for table_id, work in self._waiting.items():
                if table_id not in self._running:
                    del self._waiting[table_id]
                    self._running.add(table_id)
                    return work
        return None

    def done(self, table_id: str) -> None:
        with self._lock:
            self._running.discard(table_id)

    def oldest_age(self, now: float) -> float:
        """How long the oldest waiting table has waited (the lag metric)."""
        with self._lock:
            return max((now - w.queued_at for w in self._waiting.values()), default=0.0)
