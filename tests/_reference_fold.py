"""The timeline's state by ``apply``, one entry at a time: the oracle replay's folds are checked
against (it shares nothing with them but the state machine's handlers)."""

from __future__ import annotations

from collections.abc import Mapping

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
