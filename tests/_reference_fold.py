"""The timeline's state by ``apply``, one entry at a time: the oracle replay's folds are checked
against (it shares nothing with them but the state machine's handlers)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from lakewarden.table.state_machine import Rejected, apply
from lakewarden.table.timeline_state import TimelineEntry, TimelineState


def apply_in_seq_order(entries: Mapping[int, TimelineEntry]) -> TimelineState:
    """``entries`` applied in seq order; a rejected one moves the tail past it and is listed in
    ``rejected`` as ``(seq, reason)``."""
    state = TimelineState()
    rejected = []
    for seq in sorted(entries):
        verdict = apply(state, entries[seq])
        if isinstance(verdict, Rejected):
            rejected.append((seq, verdict.reason))
            state = state.model_copy(update={"tail_seq": max(state.tail_seq, seq)})
        else:
            state = verdict
    return state.model_copy(update={"rejected": tuple(rejected)})


def timeline_entry(record: Mapping[str, Any]) -> TimelineEntry:
    """The ``TimelineEntry`` of a decoded ``TimelineTransition`` record, validated as the
    storage timeline validates it (its wall time as epoch ms, whichever way it was decoded).

    Raises: ValueError (pydantic's ValidationError included): the record makes no entry."""
    wall_time: int | datetime = record["wall_time"]
    return TimelineEntry(
        seq=record["seq"],
        instant=record["instant"],
        action=record["action"],
        transition=record["transition"],
        actor=record["actor"],
        lock_token=record["lock_token"],
        wall_time_ms=(
            wall_time if isinstance(wall_time, int) else int(wall_time.timestamp() * 1000)
        ),
        payload=json.loads(record["payload"] or "{}"),
    )
