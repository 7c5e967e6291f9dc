"""Timeline checkpoints: the derived state as of an entry, so loading need not replay from 0.

A checkpoint is ``.lakewarden/timeline/_checkpoints/<seq:020d>.json`` holding the
``TimelineState`` folded over entries ``0..seq``. It is *derived*: anyone can rebuild it by
replaying the log, so it is written best-effort (a failure is logged, never raised) with
``write_if_absent`` (racing writers never clobber one another; the content for one seq is the
same whoever computes it). A checkpoint that cannot be read, parsed or does not match its key
is skipped with a warning: the loader tries an older one, then falls back to full replay.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from lakewarden.storage import AlreadyExistsError, Storage, StorageError
from lakewarden.table.timeline_state import TimelineState

log = logging.getLogger(__name__)

TIMELINE_PREFIX = ".lakewarden/timeline/"
CHECKPOINT_PREFIX = TIMELINE_PREFIX + "_checkpoints/"
_SEQ_WIDTH = 20
_SUFFIX = ".json"


def entry_key(seq: int) -> str:
    """Storage key of timeline entry ``seq``."""
    return f"{TIMELINE_PREFIX}{seq:0{_SEQ_WIDTH}d}{_SUFFIX}"


def checkpoint_key(seq: int) -> str:
    """Storage key of the checkpoint as of entry ``seq``."""
    return f"{CHECKPOINT_PREFIX}{seq:0{_SEQ_WIDTH}d}{_SUFFIX}"


def seq_of(key: str, prefix: str) -> int | None:
    """The seq a key ``<prefix><seq:020d>.json`` names, or None for any other key."""
    name = key[len(prefix) :] if key.startswith(prefix) else ""
    digits = name[: -len(_SUFFIX)] if name.endswith(_SUFFIX) else ""
    if len(digits) != _SEQ_WIDTH or not digits.isdigit():
        return None
    return int(digits)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause CPython's cyclic garbage collector for the block, then age what it built.

    Parsing a checkpoint or replaying a log creates a million long-lived objects in one go.
    With the collector on, it rescans them again and again as they pile up (3x the parse time
    at 10k entries); re-enabled after the block, its next young collection would still scan
    them all (another 40% at 100k). So on the way out every tracked object is moved to the
    oldest generation without a scan (``gc.freeze()`` then ``gc.unfreeze()``, which is what
    that pair does when nothing else is frozen); a full collection still visits them later.
    These objects form no cycles, so nothing is lost. Skipped when the application froze
    objects itself (``unfreeze`` would undo that).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


class Checkpoint(BaseModel):
    """The persisted form of a checkpoint."""

    model_config = ConfigDict(frozen=True)

    format_version: Literal[1] = 1
    state: TimelineState


class CheckpointStore:
    """Reads and writes the checkpoints of one timeline.

    ``interval`` K: a checkpoint is due after the append of entry ``seq`` when
    ``(seq + 1) % K == 0``, i.e. whenever the log holds a multiple of K entries.
    """

    def __init__(self, storage: Storage, *, interval: int, max_tries: int = 3) -> None:
        if interval < 1:
            raise ValueError(f"checkpoint interval must be >= 1, got {interval}")
        self._storage = storage
        self.interval = interval
        self._max_tries = max_tries

    def due(self, seq: int) -> bool:
        return (seq + 1) % self.interval == 0

    def write(self, state: TimelineState) -> bool:
        """Save ``state`` as the checkpoint of its tail; best effort. Returns whether this call
        created it (False when it existed already or the store failed)."""
        key = checkpoint_key(state.tail_seq)
        data = Checkpoint(state=state).model_dump_json(exclude_defaults=True).encode()
        try:
            self._storage.write_if_absent(key, data)
        except AlreadyExistsError:
            return False
        except StorageError as err:  # derived data: the next appender at a multiple retries
            log.warning("timeline checkpoint %s not written: %s", key, err)
            return False
        return True

    def newest(self) -> TimelineState | None:
        """The state of the newest usable checkpoint, trying at most ``max_tries`` from the
        newest down; None when there is none (the caller replays from entry 0)."""
        seqs = [
            seq
            for info in self._storage.list(CHECKPOINT_PREFIX)
            if (seq := seq_of(info.key, CHECKPOINT_PREFIX)) is not None
        ]
        for seq in sorted(seqs, reverse=True)[: self._max_tries]:
            state = self._read(seq)
            if state is not None:
                return state
        return None

    def _read(self, seq: int) -> TimelineState | None:
        key = checkpoint_key(seq)
        try:
            with gc_paused():
                checkpoint = Checkpoint.model_validate_json(self._storage.read(key))
        except (StorageError, ValidationError) as err:
            log.warning("timeline checkpoint %s unusable, trying an older one: %s", key, err)
            return None
        if checkpoint.state.tail_seq != seq:
            log.warning(
                "timeline checkpoint %s holds the state as of seq %d, not %d: skipped",
                key,
                checkpoint.state.tail_seq,
                seq,
            )
            return None
        return checkpoint.state
