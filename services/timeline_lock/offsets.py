"""Which offsets of ``lock.requests`` timeline-lock may commit, without stalling its loop.

An offset may be committed once the broker acknowledged every durable write of the requests
before it: the changelog record of the lock each one changed and the dead letter of each one
rejected (replies are not durable state: a redelivered request is skipped by its offset, and a
client resends a request it got no answer to). The worker tells the tracker what it processed
and what was delivered (from librdkafka's delivery reports, in any order across topics); the
tracker answers with the next offset to commit per partition. A write that is never
acknowledged holds its partition's commit back for good (the request is then read again after
a restart, and skipped or re-applied from the changelog's state), so nothing is lost.

This replaces a flush of the producer before every commit, which blocked the loop for a full
broker round trip (tens of milliseconds on a loaded machine) once per commit interval.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable


class CommitTracker:
    """Per partition: the offsets processed and the durable writes still unacknowledged."""

    def __init__(self) -> None:
        self._next: dict[int, int] = {}  # partition -> offset after the last processed request
        self._outstanding: dict[tuple[int, int], int] = {}  # (partition, offset) -> writes
        self._order: dict[int, deque[int]] = {}  # offsets with outstanding writes, in order
        self._committed: dict[int, int] = {}

    def processed(self, partition: int, offset: int, *, durable_writes: int) -> None:
        """The request at ``offset`` was handled; ``durable_writes`` of its effects await
        the broker's acknowledgement (``delivered`` is called once for each)."""
        self._next[partition] = offset + 1
        if durable_writes > 0:
            self._outstanding[(partition, offset)] = durable_writes
            self._order.setdefault(partition, deque()).append(offset)

    def delivered(self, partition: int, offset: int) -> None:
        """One durable write of the request at ``offset`` was acknowledged."""
        key = (partition, offset)
        left = self._outstanding.get(key)
        if left is None:
            return  # its partition was revoked meanwhile
        if left <= 1:
            del self._outstanding[key]
        else:
            self._outstanding[key] = left - 1

    def to_commit(self) -> dict[int, int]:
        """The next offset to commit of each partition whose committable offset moved since
        the last call (and records it as committed)."""
        moved: dict[int, int] = {}
        for partition, after_last in self._next.items():
            order = self._order.get(partition)
            while order and (partition, order[0]) not in self._outstanding:
                order.popleft()
            offset = order[0] if order else after_last
            if self._committed.get(partition) != offset:
                moved[partition] = offset
        self._committed.update(moved)
        return moved

    def pending(self) -> int:
        """How many requests still wait for an acknowledgement."""
        return len(self._outstanding)

    def forget(self, partitions: Iterable[int]) -> None:
        """Drop what is known of revoked ``partitions`` (their next owner starts from the last
        committed offset)."""
        for partition in set(partitions):
            self._next.pop(partition, None)
            self._committed.pop(partition, None)
            for offset in self._order.pop(partition, ()):
                self._outstanding.pop((partition, offset), None)
