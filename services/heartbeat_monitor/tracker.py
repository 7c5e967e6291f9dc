"""Which instants are alive, by broker time: heartbeat-monitor's bookkeeping, free of Kafka.

The agent feeds the tracker what it consumes and applies what the tracker returns (records for
the liveness table, expiries to publish). Everything is a function of the consumed messages
and their broker timestamps; the monitor's own clock is never used to judge anyone.

Time. Each partition of ``heartbeats`` has a *frontier*: the largest broker timestamp consumed
from it. The topic stamps messages on append (LogAppendTime), so having consumed a message
stamped T means every beat appended to that partition before T was consumed too. The monitor
publishes a *tick* to every partition a few times a second, so frontiers advance on quiet
partitions. An instant is declared dead when ``frontier - last_seen > tolerance`` on its
partition. So a monitor that lags, or cannot reach the broker, stops time instead of declaring
deaths, and detection comes at most one tick (plus the trip through Kafka) after the tolerance.

Grace. After the monitor starts or is assigned a partition, it declares nothing dead on it
until its own first tick sent after the assignment comes back (the *floor*); from then on every
instant it knew gets at least one full tolerance after the floor. So a restart or rebalance
never turns the monitor's own absence into a writer's death.

Verdicts. ``alive`` on the first beat; ``dead`` when the tolerance passed (one expiry, and the
instant stays dead: later beats of a zombie do not revive it); ``ended`` on a ``final`` beat (a
new beat revives it: the owner started again on purpose). A terminal timeline transition makes
the tracker forget the instant (its record is deleted) and ignore its late beats. Dead and
ended instants are forgotten ``forget_after_ms`` of broker time later.

Changes to the liveness table are returned per partition: a change is written to the
changelog partition of the heartbeats partition it belongs to, so the loop writes the changes
of partition P only while it owns P (``advance`` returns them).
"""

from __future__ import annotations

import heapq
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from lakewarden.clients.liveness import LivenessRecord, RecordStatus

Key = tuple[str, str]  # (table id, instant)

# Terminal instants remembered so that their late beats are ignored (bounded by count: the
# timeline topic is not co-timed with heartbeats, so there is no shared clock to expire by).
FINISHED_MEMORY: Final = 100_000


@dataclass(frozen=True, slots=True)
class Beat:
    """A heartbeat as consumed: who, for what, and the broker's timestamp."""

    table_id: str
    instant: str
    owner: str
    partition: int
    broker_ms: int
    tolerance_ms: int
    final: bool = False


@dataclass(frozen=True, slots=True)
class Expiry:
    """An instant declared dead: publish one ``HeartbeatExpired``."""

    table_id: str
    instant: str
    owner: str
    partition: int
    last_seen_ms: int
    tolerance_ms: int
    frontier_ms: int


@dataclass(frozen=True, slots=True)
class Change:
    """Set (record) or delete (None) an instant's record in the liveness table."""

    key: Key
    record: LivenessRecord | None


@dataclass(slots=True)
class Outcome:
    """What the agent must do after feeding the tracker one message."""

    changes: list[Change] = field(default_factory=list)
    expiries: list[Expiry] = field(default_factory=list)

    def extend(self, other: Outcome) -> None:
        self.changes.extend(other.changes)
        self.expiries.extend(other.expiries)


@dataclass(slots=True)
class _Tracked:
    owner: str
    partition: int
    status: RecordStatus
    last_seen_ms: int
    tolerance_ms: int
    since_ms: int
    deadline_ms: int
    queued: bool = False  # has an entry in its partition's deadline heap

    def record(self) -> LivenessRecord:
        return LivenessRecord(
            status=self.status,
            owner=self.owner,
            partition=self.partition,
            last_seen_ms=self.last_seen_ms,
            tolerance_ms=self.tolerance_ms,
            since_ms=self.since_ms,
        )


@dataclass(slots=True)
class _Partition:
    frontier_ms: int = -1
    floor_ms: int | None = None  # None: in grace, nothing is declared dead
    assigned_wall_ms: int = 0
    keys: set[Key] = field(default_factory=set)
    deadlines: list[tuple[int, Key]] = field(default_factory=list)  # min-heap, lazy
    forget: list[tuple[int, Key]] = field(default_factory=list)  # min-heap of (forget at, key)
    pending: list[Change] = field(default_factory=list)  # changes made outside its events


class Tracker:
    """Liveness of instants from their beats (see the module doc). Not thread-safe: one agent
    (or one event loop) owns it."""

    def __init__(self, *, instance_id: str, forget_after_ms: int) -> None:
        self.instance_id = instance_id
        self.forget_after_ms = forget_after_ms
        self._tracked: dict[Key, _Tracked] = {}
        self._partitions: dict[int, _Partition] = {}
        self._finished: OrderedDict[Key, None] = OrderedDict()
        self.counts: Counter[str] = Counter()  # instants by status
        self.zombie_beats = 0  # beats of instants already declared dead

    # -- partitions ----------------------------------------------------------------------

    def assign(self, partitions: Iterable[int], *, wall_ms: int) -> None:
        """Partitions newly assigned to this monitor: in grace until their floor."""
        for number in partitions:
            self._drop(number)
            self._partitions[number] = _Partition(assigned_wall_ms=wall_ms)

    def revoke(self, partitions: Iterable[int]) -> None:
        """Partitions another monitor owns now: forget their instants (not their records)."""
        for number in partitions:
            self._drop(number)

    def in_grace(self, partition: int) -> bool:
        return self._partition(partition).floor_ms is None

    def accepts_floor(self, partition: int, *, sender: str, sent_wall_ms: int) -> bool:
        """Whether a tick ends the grace of ``partition``: it is ours, sent after the
        assignment, and the partition is still in grace."""
        part = self._partition(partition)
        return (
            part.floor_ms is None
            and sender == self.instance_id
            and sent_wall_ms >= part.assigned_wall_ms
        )

    def end_grace(
        self, partition: int, floor_ms: int, records: Iterable[tuple[Key, LivenessRecord]]
    ) -> Outcome:
        """End the grace of ``partition`` at broker time ``floor_ms``.

        ``records`` are the liveness table's records (of any partition; others are skipped):
        instants the tracker does not know are taken from them, and every alive instant gets a
        deadline at least one tolerance after the floor.
        """
        part = self._partition(partition)
        outcome = Outcome()
        for key, record in records:
            if record.partition != partition or key in self._tracked:
                continue
            if key in self._finished:
                outcome.changes.append(Change(key, None))  # finished while we were away
                continue
            self._add(key, record, partition)
            if record.status != "alive":
                self._schedule_forget(key, partition, record.since_ms)
        part.floor_ms = floor_ms
        part.frontier_ms = max(part.frontier_ms, floor_ms)
        for key in part.keys:
            tracked = self._tracked[key]
            if tracked.status == "alive":
                tracked.deadline_ms = max(tracked.deadline_ms, floor_ms + tracked.tolerance_ms)
                self._queue(key, tracked, part)
        return outcome

    # -- events --------------------------------------------------------------------------

    def beat(self, beat: Beat) -> Outcome:
        """A beat (or final beat) consumed from ``beat.partition``: time advances to its
        timestamp first (a beat that comes after a silence longer than the tolerance finds its
        instant dead, as its emitter finds itself lost), then the beat is recorded."""
        key = (beat.table_id, beat.instant)
        outcome = self.advance(beat.partition, beat.broker_ms)
        if key in self._finished:
            return outcome
        tracked = self._tracked.get(key)
        if tracked is None:
            record = LivenessRecord(
                status="ended" if beat.final else "alive",
                owner=beat.owner,
                partition=beat.partition,
                last_seen_ms=beat.broker_ms,
                tolerance_ms=beat.tolerance_ms,
                since_ms=beat.broker_ms,
            )
            tracked = self._add(key, record, beat.partition)
            outcome.changes.append(Change(key, tracked.record()))
            if beat.final:
                self._schedule_forget(key, beat.partition, beat.broker_ms)
            return outcome
        if tracked.status == "dead":
            self.zombie_beats += 1
            return outcome
        tracked.last_seen_ms = max(tracked.last_seen_ms, beat.broker_ms)
        tracked.owner = beat.owner
        tracked.tolerance_ms = beat.tolerance_ms
        if beat.final:
            if tracked.status != "ended":
                self._set_status(tracked, "ended", beat.broker_ms)
                outcome.changes.append(Change(key, tracked.record()))
                self._schedule_forget(key, tracked.partition, beat.broker_ms)
            return outcome
        tracked.deadline_ms = max(tracked.deadline_ms, tracked.last_seen_ms + beat.tolerance_ms)
        if tracked.status == "ended":  # the owner began again on purpose
            self._set_status(tracked, "alive", beat.broker_ms)
            outcome.changes.append(Change(key, tracked.record()))
        self._queue(key, tracked, self._partition(tracked.partition))
        return outcome

    def finish(self, table_id: str, instant: str) -> None:
        """The instant reached a terminal state: forget it and ignore its late beats. Its
        record's deletion is returned by the next ``advance`` of its partition."""
        key = (table_id, instant)
        self._finished[key] = None
        self._finished.move_to_end(key)
        while len(self._finished) > FINISHED_MEMORY:
            self._finished.popitem(last=False)
        tracked = self._tracked.get(key)
        if tracked is not None:
            self._remove(key, tracked)
            self._partition(tracked.partition).pending.append(Change(key, None))

    def advance(self, partition: int, broker_ms: int) -> Outcome:
        """Time on ``partition`` reached ``broker_ms`` (any message consumed from it): declare
        the instants whose tolerance passed dead, forget old verdicts, and hand over the
        partition's pending changes."""
        part = self._partition(partition)
        part.frontier_ms = max(part.frontier_ms, broker_ms)
        outcome = Outcome(changes=part.pending)
        part.pending = []
        if part.floor_ms is None:
            return outcome
        self._expire(part, partition, outcome)
        self._purge(part, outcome)
        return outcome

    # -- queries -------------------------------------------------------------------------

    def status(self, table_id: str, instant: str) -> RecordStatus | None:
        tracked = self._tracked.get((table_id, instant))
        return None if tracked is None else tracked.status

    def partitions_in_grace(self) -> int:
        # Also read by the metrics thread: copy first (one C-level step under the GIL).
        return sum(1 for part in list(self._partitions.values()) if part.floor_ms is None)

    def frontier(self, partition: int) -> int:
        return self._partition(partition).frontier_ms

    def __len__(self) -> int:
        return len(self._tracked)

    # -- internals -----------------------------------------------------------------------

    def _expire(self, part: _Partition, partition: int, outcome: Outcome) -> None:
        frontier = part.frontier_ms
        heap = part.deadlines
        while heap and heap[0][0] < frontier:
            _, key = heapq.heappop(heap)
            tracked = self._tracked.get(key)
            if tracked is None or tracked.partition != partition:
                continue
            tracked.queued = False
            if tracked.status != "alive":
                continue
            if tracked.deadline_ms >= frontier:  # beaten since it was queued: queue again
                self._queue(key, tracked, part)
                continue
            self._set_status(tracked, "dead", frontier)
            outcome.changes.append(Change(key, tracked.record()))
            outcome.expiries.append(
                Expiry(
                    table_id=key[0],
                    instant=key[1],
                    owner=tracked.owner,
                    partition=partition,
                    last_seen_ms=tracked.last_seen_ms,
                    tolerance_ms=tracked.tolerance_ms,
                    frontier_ms=frontier,
                )
            )
            self._schedule_forget(key, partition, frontier)

    def _purge(self, part: _Partition, outcome: Outcome) -> None:
        frontier = part.frontier_ms
        while part.forget and part.forget[0][0] <= frontier:
            _, key = heapq.heappop(part.forget)
            tracked = self._tracked.get(key)
            # An instant revived and ended again since it was scheduled waits for its own turn.
            if (
                tracked is not None
                and tracked.status != "alive"
                and tracked.since_ms + self.forget_after_ms <= frontier
            ):
                self._remove(key, tracked)
                outcome.changes.append(Change(key, None))

    def _add(self, key: Key, record: LivenessRecord, partition: int) -> _Tracked:
        tracked = _Tracked(
            owner=record.owner,
            partition=partition,
            status=record.status,
            last_seen_ms=record.last_seen_ms,
            tolerance_ms=record.tolerance_ms,
            since_ms=record.since_ms,
            deadline_ms=record.last_seen_ms + record.tolerance_ms,
        )
        self._tracked[key] = tracked
        part = self._partition(partition)
        part.keys.add(key)
        self.counts[record.status] += 1
        if record.status == "alive":
            self._queue(key, tracked, part)
        return tracked

    def _remove(self, key: Key, tracked: _Tracked) -> None:
        del self._tracked[key]
        self._partition(tracked.partition).keys.discard(key)
        self.counts[tracked.status] -= 1

    def _set_status(self, tracked: _Tracked, status: RecordStatus, since_ms: int) -> None:
        self.counts[tracked.status] -= 1
        self.counts[status] += 1
        tracked.status = status
        tracked.since_ms = since_ms

    def _queue(self, key: Key, tracked: _Tracked, part: _Partition) -> None:
        # One heap entry per instant: a beat only moves ``deadline_ms``; the stale entry is
        # re-queued when it surfaces, so the heap stays as large as the number of instants.
        if not tracked.queued:
            heapq.heappush(part.deadlines, (tracked.deadline_ms, key))
            tracked.queued = True

    def _schedule_forget(self, key: Key, partition: int, since_ms: int) -> None:
        heapq.heappush(self._partition(partition).forget, (since_ms + self.forget_after_ms, key))

    def _partition(self, number: int) -> _Partition:
        part = self._partitions.get(number)
        if part is None:
            part = self._partitions[number] = _Partition()
        return part

    def _drop(self, number: int) -> None:
        part = self._partitions.pop(number, None)
        if part is None:
            return
        for key in part.keys:
            tracked = self._tracked.pop(key)
            self.counts[tracked.status] -= 1
