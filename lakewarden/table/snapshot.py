"""Snapshots: which files make up the table as of a completed instant.

A snapshot is computed from the completed instants alone, in completion order (the order of
their ``completed`` entries on the timeline), applying each instant's ``CommitStats``:

1. every file group in ``replaced_file_groups`` leaves the snapshot;
2. every write statistic names a file: a base file starts a new file slice of its file group
   (the previous slice is superseded), a log file joins the slice of its base instant.

Nothing is found by listing data directories: a file no completed instant names is invisible,
wherever it sits. Pending, rolled-back and aborted instants are simply not in the input.
The conflict rules guarantee that two instants touching one file group are ordered, so
completion order is the order in which their slices were built on each other.

A writer builds on ``snapshot_as_of_request``: the snapshot as of its own ``requested`` entry.
An opened table keeps a ``SnapshotCache``, so that its writes and its read manifests apply only
the instants completed since the last one instead of replaying the whole timeline: without it,
the cost of a small write grows with the table's history.

Incremental reads use ``changes_since``: the instants completed after a given one and the
latest slices they wrote (see ``lakewarden.table.reader``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from lakewarden.errors import NonRetryableError
from lakewarden.table.files import LogFileName, is_log_file, split_key
from lakewarden.table.stats import CommitStats, FileGroupId, WriteStat

if TYPE_CHECKING:
    from lakewarden.table.timeline_state import TimelineState


class InstantNotCompletedError(NonRetryableError):
    """A snapshot or incremental read names an instant that is not completed."""


class InstantNotOnTimelineError(NonRetryableError):
    """A snapshot as of an instant's ``requested`` entry, for an instant with no such entry."""


class CompletedInstant(Protocol):
    """What a snapshot needs of a completed instant (``timeline.InstantState`` has it)."""

    @property
    def instant(self) -> str: ...

    @property
    def commit(self) -> CommitStats | None: ...


@dataclass(frozen=True, slots=True)
class FileSlice:
    """The current files of one file group: a base file and the log files built on it."""

    file_group: FileGroupId
    base_instant: str
    base_file: WriteStat | None
    log_files: tuple[WriteStat, ...] = ()
    # The completed instant that last added a file to this slice (incremental reads).
    latest_instant: str = ""

    @property
    def paths(self) -> tuple[str, ...]:
        base = (self.base_file.path,) if self.base_file is not None else ()
        return base + tuple(s.path for s in self.log_files)

    @property
    def num_records(self) -> int:
        return sum(s.num_records for s in ((self.base_file,) if self.base_file else ()))


@dataclass(frozen=True)
class Snapshot:
    """The table as of ``as_of`` (None: nothing completed yet)."""

    as_of: str | None
    slices: Mapping[FileGroupId, FileSlice] = field(default_factory=dict)

    def base_files(self) -> list[WriteStat]:
        """Base files in a stable order (partition path, file id)."""
        ordered = sorted(
            self.slices.values(), key=lambda s: (s.file_group.partition_path, s.file_group.file_id)
        )
        return [s.base_file for s in ordered if s.base_file is not None]

    def slice_of(self, file_group: FileGroupId) -> FileSlice | None:
        return self.slices.get(file_group)

    @property
    def num_records(self) -> int:
        """Records in the base files (exact for copy-on-write tables)."""
        return sum(s.num_records for s in self.slices.values())


def _position(completed: Sequence[CompletedInstant], instant: str, what: str) -> int:
    for i, state in enumerate(completed):
        if state.instant == instant:
            return i
    raise InstantNotCompletedError(
        f"{what} {instant!r} is not a completed instant of this table. "
        "Help: pass an instant from CommitResult.instant or table.timeline() whose state is "
        "completed.",
        instant=instant,
    )


def build_snapshot(completed: Sequence[CompletedInstant], as_of: str | None = None) -> Snapshot:
    """The snapshot as of ``as_of`` (default: the last completed instant).

    ``completed`` must be in completion order. Raises: InstantNotCompletedError."""
    end = len(completed) if as_of is None else _position(completed, as_of, "as_of") + 1
    slices: dict[FileGroupId, FileSlice] = {}
    for state in completed[:end]:
        if state.commit is not None:
            _apply(slices, state.instant, state.commit)
    last = completed[end - 1].instant if end else None
    return Snapshot(as_of=last, slices=slices)


class SnapshotBuilder:
    """Builds snapshots instant by instant, in completion order, and can be kept between
    calls: a caller that sees the same completed instants plus new ones at the end (the
    timeline only grows) applies only the new ones."""

    def __init__(self) -> None:
        self._slices: dict[FileGroupId, FileSlice] = {}
        self._applied: list[str] = []
        self._last: Snapshot | None = None  # as of the last applied instant, if yielded

    def steps(
        self, completed: Sequence[CompletedInstant], *, start: int = 0
    ) -> Iterator[tuple[int, Snapshot]]:
        """``(i, snapshot as of completed[i])`` for each ``i >= start``: what
        ``build_snapshot(completed, as_of=completed[i].instant)`` gives. The instants before
        ``start`` are applied but not yielded (those applied by an earlier call are not applied
        again, when ``completed`` still begins with them)."""
        done = len(self._applied)
        resumable = done <= start or (done == start + 1 and self._last is not None)
        if (
            not resumable
            or done > len(completed)
            or (done and completed[done - 1].instant != self._applied[-1])
        ):
            self._slices, self._applied, self._last, done = {}, [], None, 0
        if done == start + 1 and self._last is not None:
            yield start, self._last
        for i in range(done, len(completed)):
            state = completed[i]
            if state.commit is not None:
                _apply(self._slices, state.instant, state.commit)
            self._applied.append(state.instant)
            self._last = None
            if i >= start:
                self._last = Snapshot(as_of=state.instant, slices=dict(self._slices))
                yield i, self._last


def snapshot_steps(
    completed: Sequence[CompletedInstant], *, start: int = 0
) -> Iterator[tuple[int, Snapshot]]:
    """``(i, snapshot as of completed[i])`` for each ``i >= start``, in one pass (see
    ``SnapshotBuilder.steps``)."""
    return SnapshotBuilder().steps(completed, start=start)


class SnapshotCache:
    """The latest snapshot of a prefix of the completed instants, kept between calls by an
    opened table (``TableHandle.snapshots``) and shared by its threads: each call applies only
    the instants completed since the call before (``SnapshotBuilder``). The ``RECENT``
    snapshots returned last are kept too, so a writer asking for the prefix before its own
    request, just after the completion that followed it was applied, does not rebuild; any
    other shorter prefix rebuilds from the start. The answer is always
    ``build_snapshot(completed)``."""

    RECENT = 4

    def __init__(self) -> None:
        self._builder = SnapshotBuilder()
        # (length, last instant) of a prefix -> its snapshot: a table's completed instants
        # come in one order, so the two name the prefix.
        self._recent: OrderedDict[tuple[int, str], Snapshot] = OrderedDict()
        self._lock = threading.Lock()

    def latest(self, completed: Sequence[CompletedInstant]) -> Snapshot:
        """``build_snapshot(completed)``: the snapshot as of the last of ``completed`` (in
        completion order)."""
        if not completed:
            return Snapshot(as_of=None)
        prefix = (len(completed), completed[-1].instant)
        with self._lock:
            found = self._recent.get(prefix)
            if found is None:
                found = next(self._builder.steps(completed, start=len(completed) - 1))[1]
                self._recent[prefix] = found
                while len(self._recent) > self.RECENT:
                    self._recent.popitem(last=False)
            return found


# Handles opened on one table in one process share a cache: the Spark driver and job-committer
# open a handle per commit, and a fresh cache would replay the table's whole history each time.
SHARED_CACHES = 32
_shared: OrderedDict[tuple[str, str], SnapshotCache] = OrderedDict()
_shared_lock = threading.Lock()


def shared_cache(uri: str, table_id: str) -> SnapshotCache:
    """This process's ``SnapshotCache`` of the table ``table_id`` at ``uri``, shared by every
    handle opened on it; the ``SHARED_CACHES`` tables asked for most recently keep theirs.
    Sharing is safe: the completed instants of a table come in one order wherever they were
    loaded, so a handle loaded to an older tail costs a rebuild, never a wrong snapshot."""
    key = (uri, table_id)
    with _shared_lock:
        cache = _shared.get(key)
        if cache is None:
            cache = _shared[key] = SnapshotCache()
        _shared.move_to_end(key)
        while len(_shared) > SHARED_CACHES:
            _shared.popitem(last=False)
        return cache


def snapshot_as_of_request(
    state: TimelineState,
    instant: str,
    *,
    table: str | None = None,
    cache: SnapshotCache | None = None,
) -> Snapshot:
    """The snapshot ``instant`` builds on: the instants completed before its ``requested``
    entry. What a writer merges with and an overwrite replaces; a completion after that entry
    on a file group the instant touches is a conflict anyway (``lakewarden.table.conflicts``).
    With a ``cache``, only the instants completed since its last call are applied.

    Raises: InstantNotOnTimelineError (``state`` has no ``requested`` entry of ``instant``)."""
    mine = state.get(instant)
    if mine is None:
        raise InstantNotOnTimelineError(
            f"instant {instant} is not on the timeline of table {table!r}. Help: pass an "
            "instant whose requested entry was appended, and load the timeline after it.",
            table=table,
            instant=instant,
        )
    before = [s for s in state.completed() if (s.completed_seq or 0) < mine.requested_seq]
    return cache.latest(before) if cache is not None else build_snapshot(before)


def _apply(slices: dict[FileGroupId, FileSlice], instant: str, commit: CommitStats) -> None:
    for group in commit.replaced_file_groups:
        slices.pop(group, None)
    for stat in commit.write_stats:
        name = split_key(stat.path)[1]
        current = slices.get(stat.file_group)
        if not is_log_file(name):
            slices[stat.file_group] = FileSlice(stat.file_group, instant, stat, (), instant)
            continue
        base_instant = LogFileName.parse(name).base_instant
        if current is not None and current.base_instant == base_instant:
            logs = current.log_files + (stat,)
            slices[stat.file_group] = FileSlice(
                stat.file_group, base_instant, current.base_file, logs, instant
            )
        else:
            # A log file on a base instant no longer current starts a log-only slice (MOR
            # inserts into a new file group write logs before any base file exists).
            slices[stat.file_group] = FileSlice(
                stat.file_group, base_instant, None, (stat,), instant
            )


@dataclass(frozen=True)
class Changes:
    """What an incremental read covers: ``instants`` completed after ``since`` up to
    ``snapshot.as_of``, and the slices of ``snapshot`` they last wrote."""

    since: str | None
    instants: tuple[str, ...]
    snapshot: Snapshot

    def slices(self) -> list[FileSlice]:
        written = set(self.instants)
        return [s for s in self.snapshot.slices.values() if s.latest_instant in written]


def changes_since(
    completed: Sequence[CompletedInstant], since: str | None, until: str | None = None
) -> Changes:
    """The instants completed after ``since`` (None: from the start) up to ``until`` (default:
    the last completed), in completion order, with the snapshot as of ``until``.

    Raises: InstantNotCompletedError."""
    start = 0 if since is None else _position(completed, since, "since_instant") + 1
    end = len(completed) if until is None else _position(completed, until, "until") + 1
    snapshot = build_snapshot(completed[:end])
    return Changes(since, _instants(completed[start:end]), snapshot)


def _instants(states: Iterable[CompletedInstant]) -> tuple[str, ...]:
    return tuple(s.instant for s in states)
