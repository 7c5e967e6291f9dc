"""Gaps in the timeline: detecting them, and the one repair that never guesses.

A gap is an entry missing while a later one exists (deleted by hand, a broken store, a bad
restore). It is corruption: the missing transition may be the ``inflight`` that a later
``completed`` needs, so a reader that stopped at the hole would silently drop every later
completed instant, and a writer that appended *into* the hole would make the later entries
illegal forever. So ``Timeline`` confirms the end of the log whenever it finds a missing key
(``first_entry_after``) and raises ``TimelineGapError`` for reads and writes alike.

Repair (``lakewarden timeline repair URI --fill-gaps``) writes a ``LostEntry`` placeholder at
each missing seq, with ``write_if_absent`` (it never replaces an entry). The state machine
ignores a placeholder like any illegal entry: its seq is consumed and ``state.rejected`` says
it was lost; the later entries are then judged as usual, and those that needed the lost one
are rejected and reported too. That is the honest outcome: what the lost entry said cannot be
reconstructed from storage, so the repair makes the loss explicit instead of hiding it.
Restoring the real entry (from a backup, or the timeline topic: ``lakewarden replay``) is the
better repair whenever it is possible; do it *before* filling.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from lakewarden.errors import NonRetryableError
from lakewarden.storage import AlreadyExistsError, Storage
from lakewarden.table.checkpoint import TIMELINE_PREFIX, entry_key, seq_of

REPAIR_COMMAND = "lakewarden timeline repair <table-uri> --fill-gaps"


class TimelineCorruptError(NonRetryableError):
    """The log has a hole: an entry is missing below the tail (deleted by hand, or a broken
    store). Readers refuse to guess; restore the entry or rebuild the table's timeline."""


class TimelineGapError(TimelineCorruptError):
    """Entry ``missing_seq`` is absent but entry ``next_seq`` exists: reads and writes stop."""

    def __init__(self, *, missing_seq: int, next_seq: int, table: str | None) -> None:
        super().__init__(
            f"timeline entry {missing_seq} is missing but entry {next_seq} exists: the log "
            "has a gap, so neither reads nor writes can trust what follows it. Help: restore "
            "the missing entry from a backup or the timeline topic (`lakewarden replay "
            f"<table-uri>` shows it), or run `{REPAIR_COMMAND}` to mark it lost (readers then "
            "ignore it and report the entries that needed it).",
            table=table,
        )
        self.missing_seq = missing_seq
        self.next_seq = next_seq


class LostEntry(BaseModel):
    """The placeholder ``timeline repair`` writes where an entry was lost."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int = Field(ge=0)
    lost: Literal[True] = True
    note: str = Field(min_length=1, description="who filled it, when, and why")


def first_entry_after(storage: Storage, seq: int) -> int | None:
    """The seq of the first entry stored after entry ``seq``, from one listing; None when
    there is none. Called when entry ``seq`` was found missing: a result means a gap.

    Raises: StorageError."""
    for info in storage.list(TIMELINE_PREFIX, start_after=entry_key(seq)):
        found = seq_of(info.key, TIMELINE_PREFIX)
        if found is not None:
            return found
        if info.key.startswith(TIMELINE_PREFIX + "_"):
            return None  # checkpoints sort after every entry key
    return None


def find_gaps(storage: Storage) -> tuple[list[int], int]:
    """The missing seqs below the last stored entry, and that entry's seq (-1: empty log).

    Raises: StorageError."""
    present = sorted(
        seq
        for info in storage.list(TIMELINE_PREFIX)
        if (seq := seq_of(info.key, TIMELINE_PREFIX)) is not None
    )
    if not present:
        return [], -1
    have = set(present)
    return [s for s in range(present[-1]) if s not in have], present[-1]


def fill_gap(storage: Storage, seq: int, *, note: str) -> bool:
    """Write the ``LostEntry`` placeholder at ``seq`` unless an entry is there already (it was
    restored meanwhile); returns whether this call wrote it.

    Raises: StorageError (other than the entry existing)."""
    data = LostEntry(seq=seq, note=note).model_dump_json().encode()
    try:
        storage.write_if_absent(entry_key(seq), data)
    except AlreadyExistsError:
        return False
    return True


def lost_reason(data: bytes, seq: int) -> str | None:
    """Why entry ``seq`` is ignored if ``data`` is a placeholder ``LostEntry``; else None."""
    try:
        entry = LostEntry.model_validate_json(data)
    except ValueError:
        return None
    if entry.seq != seq:
        return None
    return f"entry lost and marked so by `lakewarden timeline repair`: {entry.note}"


__all__ = [
    "REPAIR_COMMAND",
    "LostEntry",
    "TimelineCorruptError",
    "TimelineGapError",
    "fill_gap",
    "find_gaps",
    "first_entry_after",
    "lost_reason",
]
