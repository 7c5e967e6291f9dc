"""When error-sink gives up on buffered records whose main instant it cannot find.

The sink holds a main instant's failed records until storage says how the instant ended, and
commits its Kafka offsets only below what it holds. A record whose context names a table that
does not exist, or an instant that never reaches the timeline, would therefore be held forever
and pin its partition's committed offset (every restart re-reads from it). This module bounds
that: a key (table id, instant) whose instant is *unresolved* (not on its table's timeline, or
the timeline cannot be read) on at least ``after_checks`` consecutive checks spanning at least
``after_s`` seconds (on an injected clock) is given up on; the sink then dead-letters its
records with their original bytes, so nothing is lost, and its offsets move on.

Both bounds must pass: the age keeps a burst of quick checks from giving up on a store that
is briefly unreachable, the count keeps a sink that was paused (or whose clock jumped) from
giving up without having looked. An instant that *is* on the timeline and still pending
(requested, inflight) is never given up on here: a long Spark job is legitimate, and a dead
writer's instant is rolled back by the cleaner, which settles its records as discarded.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lakewarden.clock import SYSTEM_CLOCK, Clock
from lakewarden.errortable import SourceKey

__all__ = ["GIVE_UP_REASON", "GiveUp", "Unresolved", "UnresolvedSources"]

# The DeadLetter reason of records given up on (machine-readable; the detail says why).
GIVE_UP_REASON = "unresolved_source"


@dataclass(frozen=True, slots=True)
class Unresolved:
    """A check could not find the instant: not on its table's timeline, or no timeline could
    be read at the record's table URI (``reason`` says which)."""

    reason: str


@dataclass(frozen=True, slots=True)
class GiveUp:
    """The verdict on a key: dead-letter its records, saying ``detail``."""

    key: SourceKey
    detail: str


@dataclass(slots=True)
class _Seen:
    since: float
    checks: int


class UnresolvedSources:
    """Counts, per key, the consecutive checks that could not find its instant.

    ``note`` after each such check (``why``: what the check found); ``resolved`` when a check
    found the instant (the count starts again if it is lost later); ``keep`` forgets keys the
    buffer no longer holds (settled, revoked).
    """

    def __init__(self, *, after_s: float, after_checks: int, clock: Clock = SYSTEM_CLOCK) -> None:
        self.after_s = after_s
        self.after_checks = after_checks
        self._clock = clock
        self._seen: dict[SourceKey, _Seen] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def note(self, key: SourceKey, why: str) -> GiveUp | None:
        """One more check could not find ``key``'s instant; the verdict once both bounds
        passed, else ``None``."""
        now = self._clock.monotonic()
        seen = self._seen.setdefault(key, _Seen(since=now, checks=0))
        seen.checks += 1
        age = now - seen.since
        if seen.checks < self.after_checks or age < self.after_s:
            return None
        return GiveUp(
            key,
            f"instant {key.instant} of table {key.table_id} was not found on {seen.checks} "
            f"checks over {age:.0f} s (last: {why}); its failed records are given up on "
            "so the partition's offsets can move (the table URI in their context may be "
            "wrong, or the instant never reached the timeline)",
        )

    def resolved(self, key: SourceKey) -> None:
        self._seen.pop(key, None)

    def keep(self, keys: Iterable[SourceKey]) -> None:
        live = set(keys)
        for key in [k for k in self._seen if k not in live]:
            del self._seen[key]
