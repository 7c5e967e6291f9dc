"""Instants: the ordered, parseable names of timeline events.

An instant time is a 17-digit UTC timestamp ``yyyyMMddHHmmssSSS``. Because every field has a
fixed width, the lexicographic order of instant times is their chronological order, so an
``Instant`` compares by its string. Instant times are strictly increasing across ``requested``
entries; a writer generates one while holding the table lock as
``Instant.next_after(last_requested)`` = max(now, last + 1 ms).

``Instant.file_name`` is the bare time: that is what data file names embed
(``<fileId>_<writeToken>_<instant>.parquet``). ``QualifiedInstant`` adds the action and the
transition, Hudi-style (``<time>.<action>.<transition>``), for display, logs and messages; the
timeline itself stores transitions by sequence number, not by these names.
"""

from __future__ import annotations

import re
import time as _time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from lakewarden.errors import NonRetryableError

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)
_TIME_RE = re.compile(r"\d{17}")


class Action(StrEnum):
    """What an instant does."""

    COMMIT = "commit"
    DELTACOMMIT = "deltacommit"
    COMPACTION = "compaction"
    CLUSTERING = "clustering"
    CLEAN = "clean"
    ROLLBACK = "rollback"


class Transition(StrEnum):
    """A step of an instant's life; also the name of the state it leads to."""

    REQUESTED = "requested"
    INFLIGHT = "inflight"
    COMPLETED = "completed"
    CANCEL_REQUESTED = "cancel_requested"
    ABORTED = "aborted"
    ROLLED_BACK = "rolled_back"


# Writes that ingest data: they may be rolled back by their writer or, after their heartbeat
# expired, by the cleaner.
INGESTION_ACTIONS = frozenset({Action.COMMIT, Action.DELTACOMMIT})
# Table-service plans (RFC-79): executed to completion, or, when scheduled cancellable,
# cancelled (cancel_requested -> aborted). Never rolled back: the plan is kept.
TABLE_SERVICE_ACTIONS = frozenset({Action.COMPACTION, Action.CLUSTERING})
# Actions whose plan is their whole workload: they may complete straight from requested.
NO_WORKLOAD_ACTIONS = frozenset({Action.CLEAN, Action.ROLLBACK})
TERMINAL_STATES = frozenset({Transition.COMPLETED, Transition.ABORTED, Transition.ROLLED_BACK})
PENDING_STATES = frozenset({Transition.REQUESTED, Transition.INFLIGHT, Transition.CANCEL_REQUESTED})


class InvalidInstantError(NonRetryableError, ValueError):
    """A string is not an instant time or an instant file name."""


@dataclass(frozen=True, order=True, slots=True)
class Instant:
    """An instant time; ``str(instant)`` is the 17-digit time.

    Raises: InvalidInstantError when ``time`` is not 17 digits forming a valid UTC date-time.
    """

    time: str

    def __post_init__(self) -> None:
        _to_datetime(self.time)

    def __str__(self) -> str:
        return self.time

    @classmethod
    def parse(cls, text: str) -> Instant:
        """Parse a bare instant time (``Instant.parse(str(i)) == i``).

        Raises: InvalidInstantError naming the input and the expected format.
        """
        return cls(text)

    @classmethod
    def from_epoch_ms(cls, epoch_ms: int) -> Instant:
        """The instant of a UTC epoch time in milliseconds.

        Raises: InvalidInstantError when the time is outside years 1..9999.
        """
        try:
            moment = _EPOCH + epoch_ms * _ONE_MS
        except OverflowError as err:
            raise InvalidInstantError(f"epoch ms {epoch_ms} is outside years 1..9999") from err
        return cls(
            f"{moment.year:04d}{moment.month:02d}{moment.day:02d}{moment.hour:02d}"
            f"{moment.minute:02d}{moment.second:02d}{moment.microsecond // 1000:03d}"
        )

    @classmethod
    def next_after(cls, last: Instant | None, now_ms: int | None = None) -> Instant:
        """A new instant strictly after ``last``: max(now, last + 1 ms).

        Call it while holding the table lock, with ``last`` the newest requested instant, so
        instant times stay strictly increasing even when wall clocks step backwards.
        """
        now = _time.time_ns() // 1_000_000 if now_ms is None else now_ms
        if last is not None:
            now = max(now, last.epoch_ms + 1)
        return cls.from_epoch_ms(now)

    @property
    def epoch_ms(self) -> int:
        """Milliseconds since the UTC epoch."""
        return (_to_datetime(self.time) - _EPOCH) // _ONE_MS

    @property
    def file_name(self) -> str:
        """The form data file names embed: the bare time."""
        return self.time


@dataclass(frozen=True, order=True, slots=True)
class QualifiedInstant:
    """An instant with its action and state, named ``<time>.<action>.<transition>``."""

    instant: Instant
    action: Action
    transition: Transition

    def __str__(self) -> str:
        return self.file_name

    @property
    def file_name(self) -> str:
        return f"{self.instant.time}.{self.action.value}.{self.transition.value}"

    @classmethod
    def parse(cls, name: str) -> QualifiedInstant:
        """Parse ``<time>.<action>.<transition>`` (the inverse of ``file_name``).

        Raises: InvalidInstantError naming the part that is wrong.
        """
        parts = name.split(".")
        if len(parts) != 3:
            raise InvalidInstantError(
                f"{name!r} is not an instant name: expected '<time>.<action>.<transition>', "
                "e.g. '20240102030405678.commit.completed'"
            )
        time_part, action, transition = parts
        try:
            return cls(Instant(time_part), Action(action), Transition(transition))
        except ValueError as err:
            if isinstance(err, InvalidInstantError):
                raise
            raise InvalidInstantError(
                f"{name!r} is not an instant name: unknown action or transition "
                f"(actions: {', '.join(Action)}; transitions: {', '.join(Transition)})"
            ) from err


def _to_datetime(text: str) -> datetime:
    # Slicing ints is several times faster than strptime and is on the replay path.
    if not isinstance(text, str) or _TIME_RE.fullmatch(text) is None:
        raise InvalidInstantError(
            f"{text!r} is not an instant time: expected 17 digits yyyyMMddHHmmssSSS (UTC), "
            "e.g. '20240102030405678'"
        )
    try:
        return datetime(
            int(text[0:4]),
            int(text[4:6]),
            int(text[6:8]),
            int(text[8:10]),
            int(text[10:12]),
            int(text[12:14]),
            int(text[14:17]) * 1000,
            tzinfo=UTC,
        )
    except ValueError as err:
        raise InvalidInstantError(
            f"{text!r} is not an instant time: {err} (expected yyyyMMddHHmmssSSS, UTC)"
        ) from err
