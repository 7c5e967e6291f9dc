"""Timeline checkpoints: the derived state as of an entry, so loading need not replay from 0.

A checkpoint is ``.lakewarden/timeline/_checkpoints/<seq:020d>.json`` holding the
``TimelineState`` folded over entries ``0..seq``. It is *derived*: anyone can rebuild it by
replaying the log, so it is written best-effort (a failure is logged, never raised) with
``write_if_absent`` (racing writers never clobber one another; the content for one seq is the
same whoever computes it). A checkpoint that cannot be read, parsed or does not match its key
is skipped with a warning: the loader tries an older one, then falls back to full replay.

Never trusted blindly (format 2). The file is a header line, then the state's JSON; the header
carries the SHA-256 of those state bytes and of the raw bytes of entry ``seq`` (the last entry
it summarises). A loader uses a checkpoint only if (1) the state bytes match their digest (a
bit flip or an edit that still parses is caught), (2) entry ``seq`` exists and matches its
digest (a checkpoint of another log, or of a log rewritten below it, is caught), and (3) the
state shows that entry: its instant's last transition is at ``seq``, or the entry is among the
rejected (a forged state "with the right tail but no instants" is caught). Format-1
checkpoints (before the digests) are ignored with a warning, never trusted: the loader replays
the entries instead, and the next checkpoint written is format 2. What this does not catch is
a deliberate forgery that recomputes both digests and keeps the last instant: storage write
access is trusted; ``Timeline.load(full_replay=True)`` ignores checkpoints altogether.
"""

from __future__ import annotations

import gc
import hashlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lakewarden.storage import AlreadyExistsError, NotFoundError, Storage, StorageError
from lakewarden.table.timeline_state import TimelineEntry, TimelineState

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
    With the collector on, it rescans them again and again as they pile up (the scans then
    cost more than the parse itself); re-enabled after the block, its next young collection
    would still scan them all once more. So on the way out every tracked object is moved to the
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


_SHA256 = r"^[0-9a-f]{64}$"


class CheckpointHeader(BaseModel):
    """The first line of a checkpoint file: what the state bytes after it must match."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format_version: Literal[2] = 2
    tail_seq: int = Field(ge=0)
    state_sha256: str = Field(pattern=_SHA256)
    last_entry_sha256: str = Field(pattern=_SHA256, description="of entry tail_seq's bytes")


class UnusableCheckpoint(Exception):
    """Why a checkpoint is skipped (internal: the loader logs it and tries an older one)."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def encode_checkpoint(state: TimelineState, last_entry: bytes) -> bytes:
    """The format-2 checkpoint file of ``state``, whose entry ``state.tail_seq`` is
    ``last_entry`` (its raw bytes)."""
    body = state.model_dump_json(exclude_defaults=True).encode()
    header = CheckpointHeader(
        tail_seq=state.tail_seq,
        state_sha256=_sha256(body),
        last_entry_sha256=_sha256(last_entry),
    )
    return header.model_dump_json().encode() + b"\n" + body


def decode_checkpoint(data: bytes, seq: int, last_entry: bytes | None) -> TimelineState:
    """The state of checkpoint ``seq`` after the three checks of the module docstring;
    ``last_entry`` is the raw bytes of entry ``seq`` (None: missing).

    Raises: UnusableCheckpoint (why it must not be used)."""
    head, newline, body = data.partition(b"\n")
    if not newline:
        raise UnusableCheckpoint("it carries no digest (format 1, or truncated): not trusted")
    try:
        header = CheckpointHeader.model_validate_json(head)
    except ValidationError as err:
        raise UnusableCheckpoint(f"its header is malformed: {err.errors()[0]['msg']}") from err
    if header.tail_seq != seq:
        raise UnusableCheckpoint(f"its header says seq {header.tail_seq}, not {seq}")
    if _sha256(body) != header.state_sha256:
        raise UnusableCheckpoint("its state does not match the state digest")
    if last_entry is None:
        raise UnusableCheckpoint(f"entry {seq}, which it summarises last, is missing")
    if _sha256(last_entry) != header.last_entry_sha256:
        raise UnusableCheckpoint(f"entry {seq} does not match the checkpoint's digest of it")
    try:
        state = TimelineState.model_validate_json(body)
    except ValidationError as err:
        raise UnusableCheckpoint(f"its state is malformed: {err.errors()[0]['msg']}") from err
    if state.tail_seq != seq:
        raise UnusableCheckpoint(f"it holds the state as of seq {state.tail_seq}, not {seq}")
    _check_shows_last_entry(state, last_entry)
    return state


def _check_shows_last_entry(state: TimelineState, last_entry: bytes) -> None:
    """The state must reflect its own last entry: the instant's last transition is at that
    seq, or the entry was rejected (ignored) at that seq.

    Raises: UnusableCheckpoint."""
    seq = state.tail_seq
    if any(rejection.seq == seq for rejection in state.rejected):
        return
    try:
        entry = TimelineEntry.model_validate_json(last_entry)
    except ValidationError as err:  # unparsable, yet not among the rejected
        raise UnusableCheckpoint(f"entry {seq} is malformed but not rejected in it") from err
    current = state.get(entry.instant)
    if current is None or current.last_seq != seq:
        raise UnusableCheckpoint(
            f"its state does not show entry {seq} ({entry.transition} of {entry.instant})"
        )


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

    def write(self, state: TimelineState, *, last_entry: bytes | None = None) -> bool:
        """Save ``state`` as the checkpoint of its tail; best effort. ``last_entry`` is the raw
        bytes of entry ``state.tail_seq`` (read from storage when not given). Returns whether
        this call created it (False when it existed already or the store failed)."""
        key = checkpoint_key(state.tail_seq)
        try:
            if last_entry is None:
                last_entry = self._storage.read(entry_key(state.tail_seq))
            self._storage.write_if_absent(key, encode_checkpoint(state, last_entry))
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
            data = self._storage.read(key)
            try:
                last_entry: bytes | None = self._storage.read(entry_key(seq))
            except NotFoundError:
                last_entry = None
            with gc_paused():
                return decode_checkpoint(data, seq, last_entry)
        except StorageError as err:
            log.warning("timeline checkpoint %s unusable, trying an older one: %s", key, err)
        except UnusableCheckpoint as err:
            log.warning("timeline checkpoint %s unusable, trying an older one: %s", key, err)
        return None


__all__ = [
    "CHECKPOINT_PREFIX",
    "TIMELINE_PREFIX",
    "CheckpointHeader",
    "CheckpointStore",
    "UnusableCheckpoint",
    "checkpoint_key",
    "decode_checkpoint",
    "encode_checkpoint",
    "entry_key",
    "gc_paused",
    "seq_of",
]
