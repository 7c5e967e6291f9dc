"""The timeline: an append-only, sequenced log of instant transitions in table storage.

Entry ``N`` lives at ``.lakewarden/timeline/<N:020d>.json`` (keys relative to the table root)
and is created only with ``write_if_absent`` at the tail + 1, after reading the whole prefix;
``state_machine.apply`` folded over the log is the table's state. Readers ignore illegal
entries deterministically and report them (``TimelineState.rejected``, and a warning log).
Checkpoints (``lakewarden.table.checkpoint``) every K entries bound load time.

A ``Timeline`` caches the newest state it has loaded: the log is append-only and entries are
immutable once written, so loading again only reads the entries after the cached tail. Those
are read by key (tail + 1, tail + 2, ... until one is missing), never by listing: a listing
costs the whole directory on a filesystem. Where the probe finds a key missing, one listing
after that key confirms it is the end (``timeline_gaps``): an entry missing while a later one
exists is a gap, and reads and appends raise ``TimelineGapError`` instead of stopping there
(or appending into it). Listing readers (``entries``, a full replay) prove the same.

The records (``TimelineEntry``, ``EntryDraft``, ``InstantState``, ``TimelineState``,
``Rejection``) are defined in ``timeline_state`` and re-exported here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

from pydantic import ValidationError

from lakewarden.errors import CommitStateUnknownError, NonRetryableError, RetryableError
from lakewarden.storage import (
    AlreadyExistsError,
    NotFoundError,
    Storage,
    StorageError,
    StorageIOError,
)
from lakewarden.table.checkpoint import (
    TIMELINE_PREFIX,
    CheckpointStore,
    entry_key,
    gc_paused,
    seq_of,
)
from lakewarden.table.instant import Transition
from lakewarden.table.state_machine import Rejected, Replayer, apply
from lakewarden.table.timeline_gaps import (
    TimelineCorruptError,
    TimelineGapError,
    first_entry_after,
    lost_reason,
)
from lakewarden.table.timeline_state import (
    EntryDraft,
    InstantState,
    Rejection,
    TimelineEntry,
    TimelineState,
)

log = logging.getLogger(__name__)

_Read = tuple[int, bytes, "TimelineEntry | str"]  # seq, raw bytes, entry or why malformed
DraftFactory = Callable[[TimelineState], EntryDraft]
Validator = Callable[[TimelineState, EntryDraft], None]


class ConcurrentAppendError(RetryableError):
    """Every append attempt lost the race for the tail; reload and try again later."""


class IllegalTransitionError(NonRetryableError):
    """The state machine rejects the entry against the current log; ``reason`` says why."""

    def __init__(self, message: str, *, reason: str, table: str | None, instant: str) -> None:
        super().__init__(message, table=table, instant=instant)
        self.reason = reason


class Timeline:
    """The timeline of the table whose root is ``storage``.

    ``checkpoint_interval`` K: after appending entry ``seq`` with ``(seq + 1) % K == 0`` the
    appender writes a checkpoint. ``max_append_attempts`` bounds the rebases of one append.
    ``read_ahead`` bounds the parallel reads of new entries (default: 1 on a local
    filesystem, 16 on remote stores). ``table`` only names the table in errors.
    """

    def __init__(
        self,
        storage: Storage,
        *,
        checkpoint_interval: int = 100,
        max_append_attempts: int = 16,
        read_ahead: int | None = None,
        table: str | None = None,
    ) -> None:
        self.storage = storage
        self.table = table
        self.checkpoints = CheckpointStore(storage, interval=checkpoint_interval)
        self._max_attempts = max_append_attempts
        local = storage.capabilities.local_paths  # remote stores: read entries ahead
        self._read_ahead = max(1, read_ahead if read_ahead is not None else 1 if local else 16)
        self._lock = threading.Lock()
        self._cached: TimelineState | None = None
        # Called (best effort) with each ``completed`` entry this process appended, after the
        # table lock is released: the Delta publisher of a table with publishing on.
        self.after_completed: Callable[[TimelineEntry], None] | None = None

    def appended(self, entry: TimelineEntry) -> None:
        """Tell ``after_completed`` that ``entry`` (appended here, lock released) landed; the
        caller announces it too. Never raises."""
        hook = self.after_completed
        if hook is None or entry.transition is not Transition.COMPLETED:
            return
        try:
            hook(entry)
        except Exception:  # noqa: BLE001 - best effort, like announcing: storage is the truth
            log.exception("table %s: after-completed hook failed", self.table)

    # -- reading --------------------------------------------------------------------------------

    def load(self, *, full_replay: bool = False) -> TimelineState:
        """The state as of the current tail: the cached (or newest checkpoint's) state plus the
        entries after it, read by key. ``full_replay`` ignores cache and checkpoints: it lists
        the log and replays every entry from 0 (what a verifier or the replay tool does).

        Raises: TimelineGapError (an entry is missing while a later one exists: a gap; a
        ``TimelineCorruptError``), StorageError.
        """
        if full_replay:
            return self._extend(TimelineState(), self._list_after(-1))[0]
        with self._lock:
            start = self._cached
        if start is None:
            start = self.checkpoints.newest() or TimelineState()
        return self._extend(start, self._probe_after(start.tail_seq))[0]

    def entries(self, after_seq: int = -1) -> Iterator[TimelineEntry]:
        """The well-formed entries after ``after_seq``, in seq order, from a listing (malformed
        ones are skipped with a warning; ``load`` reports them as rejected).

        Raises: TimelineCorruptError (a hole in the log), StorageError.
        """
        for seq, _, parsed in self._list_after(after_seq):
            if isinstance(parsed, TimelineEntry):
                yield parsed
            else:
                log.warning("timeline entry %d is malformed, skipped: %s", seq, parsed)

    def _list_after(self, after_seq: int) -> Iterator[_Read]:
        """The entries after ``after_seq`` by listing, which also proves the log has no hole."""
        start_after = entry_key(after_seq) if after_seq >= 0 else None
        expected = after_seq + 1
        for info in self.storage.list(TIMELINE_PREFIX, start_after=start_after):
            seq = seq_of(info.key, TIMELINE_PREFIX)
            if seq is None:
                if info.key.startswith(TIMELINE_PREFIX + "_"):
                    return  # checkpoints sort after every entry key
                continue
            if seq != expected:
                raise TimelineGapError(missing_seq=expected, next_seq=seq, table=self.table)
            data = self.storage.read(info.key)
            yield seq, data, _parse_entry(seq, data)
            expected += 1

    def _probe_after(self, after_seq: int) -> Iterator[_Read]:
        """The entries after ``after_seq`` read by key until the first missing one.

        An entry is written only at tail + 1, after reading the tail, so the first missing key
        should be the end; one listing after it proves that (a later entry means a gap:
        ``TimelineGapError``). This costs one read per new entry plus one listing however long
        the log is. Remote stores read ahead in parallel batches (doubling up to
        ``read_ahead``) to hide latency.

        Raises: TimelineGapError, StorageError.
        """
        seq, batch = after_seq + 1, 1
        while True:
            for data in self._read_many([entry_key(s) for s in range(seq, seq + batch)]):
                if data is None:
                    data = self._confirm_end(seq)
                    if data is None:
                        return
                yield seq, data, _parse_entry(seq, data)
                seq += 1
            batch = min(batch * 2, self._read_ahead)

    def _confirm_end(self, seq: int) -> bytes | None:
        """Entry ``seq`` was missing: None if it is the end of the log, its bytes if it was
        appended meanwhile (a racing writer).

        A later entry in the listing is a gap only if ``seq`` is *still* missing when read
        again after the listing: whoever wrote the later entry had read ``seq`` first, so
        ``seq`` existed and was since deleted. Without the re-read, a writer that appended
        ``seq`` and then ``seq + 1`` between our read and our listing would look like a gap.

        Raises: TimelineGapError, StorageError."""
        found = first_entry_after(self.storage, seq)
        if found is None:
            return None
        data = self._read_many([entry_key(seq)])[0]
        if data is None:
            raise TimelineGapError(missing_seq=seq, next_seq=found, table=self.table)
        return data

    def _read_many(self, keys: list[str]) -> list[bytes | None]:
        def read(key: str) -> bytes | None:
            try:
                return self.storage.read(key)
            except NotFoundError:
                return None

        if len(keys) == 1:
            return [read(keys[0])]
        return list(_read_pool().map(read, keys))

    def _extend(
        self, state: TimelineState, reads: Iterator[_Read]
    ) -> tuple[TimelineState, dict[int, bytes]]:
        """``state`` plus the entries ``reads`` yields; also returns their raw bytes by seq."""
        replayer: Replayer | None = None
        raw: dict[int, bytes] = {}
        with gc_paused():
            for seq, data, parsed in reads:
                replayer = replayer or Replayer(state)
                raw[seq] = data
                if isinstance(parsed, str):
                    replayer.reject(seq, parsed)
                else:
                    replayer.feed(parsed)
            if replayer is None:
                return state, raw
            new_state = replayer.state()
        for rejection in new_state.rejected[len(state.rejected) :]:
            log.warning("timeline entry ignored: %s", _describe(rejection))
        with self._lock:
            if self._cached is None or self._cached.tail_seq < new_state.tail_seq:
                self._cached = new_state
        return new_state, raw

    # -- appending ------------------------------------------------------------------------------

    def append(
        self, draft: EntryDraft | DraftFactory, *, validate: Validator | None = None
    ) -> tuple[TimelineEntry, TimelineState]:
        """Append one entry at the tail; returns it and the state just after it.

        ``draft`` may be a factory called with the current state on every attempt, so values
        derived from the state (the instant time) are regenerated after a rebase.
        ``validate(state, draft)`` runs against that state each time and raises the caller's
        named error (a conflict) to stop.

        Protocol:
          1. Load the whole prefix (cached state + the entries after it).
          2. Build the draft against it; run ``validate``; run the state machine.
          3. ``write_if_absent`` the entry at tail + 1.
          4. Lost the race (``AlreadyExistsError``) or unknown outcome (``StorageIOError``):
             re-read the entries after our tail (rebase). If one of them is byte-for-byte the
             entry we wrote, it landed: done. Otherwise go to 2.
          5. After ``max_append_attempts``: ``ConcurrentAppendError``, or
             ``CommitStateUnknownError`` when a write's outcome is still unknown.
          6. Done: write the checkpoint if one is due (best effort).

        Raises: IllegalTransitionError, ConcurrentAppendError, CommitStateUnknownError,
        TimelineGapError (never appends into a gap), whatever ``validate`` raises,
        StorageError from reads.
        """
        state = self.load()  # 1.
        tried: set[tuple[int, bytes]] = set()
        unknown: dict[int, StorageIOError] = {}
        for _attempt in range(self._max_attempts):
            entry, data, new_state = self._prepare(state, draft, validate)  # 2.
            tried.add((entry.seq, data))
            try:
                self.storage.write_if_absent(entry_key(entry.seq), data)  # 3.
            except AlreadyExistsError:
                pass
            except StorageIOError as err:
                log.warning("timeline append at seq %d: outcome unknown (%s)", entry.seq, err)
                unknown[entry.seq] = err
            else:
                self._landed(new_state, data)  # 6.
                return entry, new_state
            try:
                state, raw = self._extend(state, self._probe_after(state.tail_seq))  # 4.
            except StorageError as err:
                if unknown:  # cannot tell whether our write landed
                    raise self._unknown(unknown) from err
                raise
            mine = next((seq for seq, d in raw.items() if (seq, d) in tried), None)
            if mine is not None:
                return _parse_entry_ok(mine, raw[mine]), state
            # A write whose seq someone else filled can never land any more.
            unknown = {seq: err for seq, err in unknown.items() if seq > state.tail_seq}
        if unknown:  # 5.
            raise self._unknown(unknown) from unknown[min(unknown)]
        raise ConcurrentAppendError(
            f"lost the race for the timeline tail {self._max_attempts} times in a row. Help: "
            "retry later; if it persists, fewer writers per table or a coordinator lock.",
            table=self.table,
        )

    def _unknown(self, unknown: dict[int, StorageIOError]) -> CommitStateUnknownError:
        seq = min(unknown)
        return CommitStateUnknownError(
            f"appending to the timeline: the outcome of the write of entry {seq} is unknown "
            f"({unknown[seq]}) and reading the timeline back did not settle it. Help: reload "
            "the timeline and look for the entry before doing anything else.",
            table=self.table,
        )

    def _prepare(
        self, state: TimelineState, draft: EntryDraft | DraftFactory, validate: Validator | None
    ) -> tuple[TimelineEntry, bytes, TimelineState]:
        built = draft(state) if callable(draft) else draft
        if validate is not None:
            validate(state, built)
        data = built.at(state.tail_seq + 1).model_dump_json().encode()
        # What readers will parse, so that it compares equal to what they return.
        entry = _parse_entry_ok(state.tail_seq + 1, data)
        verdict = apply(state, entry)
        if isinstance(verdict, Rejected):
            raise IllegalTransitionError(
                f"{entry.transition} of {entry.action} {entry.instant} is illegal: "
                f"{verdict.reason}",
                reason=verdict.reason,
                table=self.table,
                instant=entry.instant,
            )
        return entry, data, verdict

    def _landed(self, state: TimelineState, data: bytes) -> None:
        with self._lock:
            if self._cached is None or self._cached.tail_seq < state.tail_seq:
                self._cached = state
        if self.checkpoints.due(state.tail_seq):
            self.checkpoints.write(state, last_entry=data)


_POOL_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None


def _read_pool() -> ThreadPoolExecutor:
    """One I/O pool for the read-ahead of every timeline in the process: its threads are
    created on first use and reused (a pool per load cost more than the reads it saved)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=16, thread_name_prefix="lakewarden-timeline")
        return _POOL


def _parse_entry(seq: int, data: bytes) -> TimelineEntry | str:
    """The entry, or why it is malformed (a reason string; a placeholder of a lost entry
    says so)."""
    try:
        entry = TimelineEntry.model_validate_json(data)
    except ValidationError as err:
        lost = lost_reason(data, seq)
        if lost is not None:
            return lost
        return f"malformed entry: {err.error_count()} error(s): {err.errors()[0]['msg']}"
    if entry.seq != seq:
        return f"malformed entry: it says seq {entry.seq} but is stored as entry {seq}"
    return entry


def _parse_entry_ok(seq: int, data: bytes) -> TimelineEntry:
    parsed = _parse_entry(seq, data)
    if isinstance(parsed, str):  # we serialized it ourselves
        raise AssertionError(parsed)
    return parsed


def _describe(rejection: Rejection) -> str:
    what = (
        f"{rejection.transition} of {rejection.action} {rejection.instant}"
        if rejection.instant
        else "an unreadable entry"
    )
    return f"seq {rejection.seq}: {what}: {rejection.reason}"


__all__ = [
    "ConcurrentAppendError",
    "DraftFactory",
    "EntryDraft",
    "IllegalTransitionError",
    "InstantState",
    "Rejection",
    "Timeline",
    "TimelineCorruptError",
    "TimelineEntry",
    "TimelineGapError",
    "TimelineState",
    "Validator",
]
