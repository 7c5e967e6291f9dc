"""timeline-lock's changelog writes, deferred off the request path.

A lock request's reply goes out at once; the changelog record of the lock it changed does
not. ``DeferredChangelog`` remembers which tables changed since their last record (and the
requests each change covers), and the worker writes one record per such table when
``flush`` is called: every ``changelog_interval_s`` (0.25 s by default), before an offset
commit on revocation, and at shutdown. A table changed by 400 requests a second (the cancel
benchmark's acquire and release pairs) costs four records a second instead of 400, and none
of those writes (an encode, a produce, a broker append, a delivery report) competes with a
reply any more.

Why that is still exactly-once in effect (the argument of ``state``, widened from "the
replies go out before their changelog record is acknowledged", which was already so):

1. offsets are committed only past requests whose changelog record was acknowledged
   (``offsets.CommitTracker``: a request that changed a lock counts one durable write until
   the record covering it is delivered, whenever that is written);
2. after a crash the next owner restores each lock from the changelog and reads the requests
   from the committed offset: those at or below a lock's ``applied_offset`` are skipped, the
   others are applied again, in the same log order, to the same state, so to the same
   decisions (who holds the lock, which token, who waits). The replies they send again are
   ignored by clients that no longer wait for them;
3. the clock is the one input that is not in the log: ``now_ms`` sets ``expires_ms``, and an
   ``expire`` request takes effect only on the exact ``expires_ms`` it names. A grant applied
   again after a crash gets a later ``expires_ms`` than the first time, so an ``expire`` that
   named the first value would not match on the second pass, and the two passes would
   disagree. So the expiry scanner sends an ``expire`` only for a table whose lock is
   ``durable`` (no change waiting for its record, none in flight): the ``expires_ms`` it
   names is then the changelog's, which a restarted owner restores instead of re-deriving.
   A due lease of a table that is not durable yet is flushed at once and expired on the
   scanner's next tick (0.25 s later at most, after the acknowledgement).

A record that the broker refuses (delivery failure) marks its table changed again, so the
next flush writes it anew; the offsets it covered stay uncommitted until one is acknowledged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

__all__ = ["Covered", "DeferredChangelog", "WriteRecord"]

# The (partition, offset) of every request a changelog record covers.
Covered = list[tuple[int, int]]
# Writes the table's record (its lock as it stands now); False when the table is no longer
# owned (revoked meanwhile: its next owner reads the requests again).
WriteRecord = Callable[[str, Covered], bool]


class DeferredChangelog:
    """The tables whose lock changed since their last changelog record, and the records the
    broker has not acknowledged yet. Used by the worker's thread only (delivery reports are
    served by ``producer.poll`` on that thread too)."""

    def __init__(self, write: WriteRecord, delivered: Callable[[int, int], None]) -> None:
        self._write = write
        self._delivered = delivered
        self._changed: dict[str, Covered] = {}
        self._in_flight: dict[str, int] = {}

    def changed(self, table_id: str, partition: int, offset: int) -> bool:
        """The request at ``offset`` changed the table's lock (its record is written later).
        True when that made ``pending`` grow (the table had nothing unacknowledged)."""
        covered = self._changed.get(table_id)
        if covered is not None:
            covered.append((partition, offset))
            return False
        self._changed[table_id] = [(partition, offset)]
        return table_id not in self._in_flight

    def __bool__(self) -> bool:
        """True when some table's change waits for its record."""
        return bool(self._changed)

    def flush(self, tables: Iterable[str] | None = None) -> int:
        """Write one record per changed table (of ``tables``, else of all); return how many."""
        chosen = list(self._changed if tables is None else self._changed.keys() & set(tables))
        written = 0
        for table_id in chosen:
            covered = self._changed.pop(table_id)
            if self._write(table_id, covered):
                self._in_flight[table_id] = self._in_flight.get(table_id, 0) + 1
                written += 1
        return written

    def on_delivery(self, table_id: str, covered: Covered, *, ok: bool) -> None:
        """The broker answered a record of ``table_id`` that covered ``covered``."""
        left = self._in_flight.get(table_id, 0) - 1
        if left > 0:
            self._in_flight[table_id] = left
        else:
            self._in_flight.pop(table_id, None)
        if ok:
            for partition, offset in covered:
                self._delivered(partition, offset)
        else:  # not durable: written again by the next flush
            self._changed.setdefault(table_id, [])[:0] = covered

    def durable(self, table_id: str) -> bool:
        """True when the table's lock as it stands is acknowledged in the changelog."""
        return table_id not in self._changed and table_id not in self._in_flight

    def forget(self, tables: Iterable[str]) -> None:
        """Drop what is known of ``tables`` (revoked or lost: their next owner reads their
        requests again from the last committed offset)."""
        for table_id in tables:
            self._changed.pop(table_id, None)
            self._in_flight.pop(table_id, None)

    def pending(self) -> int:
        """How many tables have a change without an acknowledged record."""
        return len(self._changed.keys() | self._in_flight.keys())
