"""Which stretch of the topics ``lakewarden explain`` reads for one instant.

An instant's story happens between its lock request, shortly before its instant time (the
time is taken under the lock), and its terminal entry (completed, aborted, rolled_back), plus
what follows the terminal entry at once: the job-commit result published after ``completed``,
the lock release, the writer's final heartbeat, the cancel-manager's result. So ``explain``
reads from ``EXPLAIN_LEAD_MS`` before the instant's time to ``EXPLAIN_TRAIL_MS`` after its
terminal entry's time (the storage timeline says when that was), instead of to the end of
every topic: the oldest instant of a long history costs what the newest does.

The expiry that caused a rollback, the cleaner's rollback and the cancel request all come
before the terminal entry, so they are inside the window. The trail covers what comes after
it and clock skew between the appender (whose wall clock stamps the entry) and the broker
(whose time Kafka's offsets-by-time lookup uses). A pending instant, or one whose terminal
time storage cannot tell, is read to the end of the topics, as before.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from lakewarden.errors import LakewardenError
from lakewarden.storage import Storage
from lakewarden.table.checkpoint import entry_key
from lakewarden.table.instant import TERMINAL_STATES, Instant
from lakewarden.table.timeline import Timeline
from lakewarden.table.timeline_state import TimelineEntry

log = logging.getLogger(__name__)

# Nothing of an instant's story happens before its time but the writer's lock request and
# grant, and a wait for the table lock longer than this is far outside normal.
EXPLAIN_LEAD_MS: Final = 15 * 60 * 1000
# After the terminal entry: results and releases published right after it (milliseconds to
# seconds), with room for the appender's clock running behind the broker's.
EXPLAIN_TRAIL_MS: Final = 5 * 60 * 1000


@dataclass(frozen=True, slots=True)
class ReadWindow:
    """Read the topics from ``since_ms`` (None: the oldest kept event) up to ``until_ms``
    (None: their end), both epoch ms in the messages' Kafka timestamps."""

    since_ms: int | None = None
    until_ms: int | None = None


def explain_since_ms(instant: str) -> int:
    """Where ``lakewarden explain`` starts reading for ``instant``: ``EXPLAIN_LEAD_MS``
    before its time (epoch ms).

    Raises: InvalidInstantError (not an instant time)."""
    return Instant.parse(instant).epoch_ms - EXPLAIN_LEAD_MS


def explain_window(instant: str, terminal_ms: int | None) -> ReadWindow:
    """The window for ``instant`` whose terminal entry was appended at ``terminal_ms``
    (None: pending, or not known: read to the end).

    Raises: InvalidInstantError (not an instant time)."""
    since = explain_since_ms(instant)
    if terminal_ms is None:
        return ReadWindow(since, None)
    # Never end before the instant's own time (an appender's clock may run behind).
    return ReadWindow(since, max(terminal_ms, since + EXPLAIN_LEAD_MS) + EXPLAIN_TRAIL_MS)


def terminal_time_ms(storage: Storage, instant: str) -> int | None:
    """When the storage timeline's terminal entry of ``instant`` was appended (the
    appender's wall clock), or None when it is pending, unknown, or the timeline cannot be
    read (``explain`` is for tables in trouble: it then reads to the end rather than fail).
    """
    try:
        state = Timeline(storage).load().instants.get(instant)
        if state is None or state.state not in TERMINAL_STATES:
            return None
        entry = TimelineEntry.model_validate_json(storage.read(entry_key(state.last_seq)))
    except (LakewardenError, ValueError) as err:  # pydantic's ValidationError is a ValueError
        log.info("terminal time of %s unknown, reading to the end: %s", instant, err)
        return None
    if entry.instant != instant or entry.transition not in TERMINAL_STATES:
        return None
    return entry.wall_time_ms


__all__ = [
    "EXPLAIN_LEAD_MS",
    "EXPLAIN_TRAIL_MS",
    "ReadWindow",
    "explain_since_ms",
    "explain_window",
    "terminal_time_ms",
]
