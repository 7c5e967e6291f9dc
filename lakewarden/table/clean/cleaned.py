"""Reads past a clean: a named error, or one retry, instead of a missing file (invariant 11).

A clean deletes files only older snapshots hold. Reading such a snapshot
(``lakewarden.read(uri, as_of=I)``, ``to_arrow_dataset(as_of=I)``, ``changes(..., until=I)``)
would otherwise fail somewhere inside pyarrow with a ``FileNotFoundError`` (or, worse, half a
result on a store that lists lazily), so the read checks the files it will open against the
files every clean instant lists first (``check_not_cleaned``) and raises
``InstantCleanedError`` naming the clean, its policy and the oldest instant still readable.

A read of the latest snapshot can still be overtaken: its snapshot is fixed when it starts,
and a write plus a clean may land before it opens a file (apache/hudi#5020). The retention
window (``CleanPolicy.retention_window_s``) keeps superseded files long enough for a read in
progress; a clean with a shorter window than the read can still get there first, so
``read_past_cleans`` runs a read, and when a file is missing:

1. reloads the timeline: a clean lists its files in its ``requested`` entry before deleting
   any, so a file a clean deleted is named by a clean of the reloaded timeline;
2. a missing file no clean names is not a clean's doing: ``MissingDataFileError``;
3. otherwise picks again on the reloaded timeline: a pinned read (``as_of``, ``until``) of a
   snapshot that lost files raises ``InstantCleanedError``, a read of the latest snapshot gets
   the new latest and runs once more (a second miss raises the named error, never a loop).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from lakewarden.errors import NonRetryableError
from lakewarden.storage import NotFoundError
from lakewarden.table.clean.retention import cleaned_by
from lakewarden.table.plans import CleanPlan
from lakewarden.table.snapshot import FileSlice, Snapshot
from lakewarden.table.timeline_state import InstantState, TimelineState

Target = TypeVar("Target")
Result = TypeVar("Result")

# pyarrow reports a local file it cannot open as FileNotFoundError; through ``Storage.read``
# (S3) a missing object is the storage contract's NotFoundError.
_MISSING = (FileNotFoundError, NotFoundError)


class InstantCleanedError(NonRetryableError):
    """The snapshot as of an instant lost files to a clean (outside its retention).

    ``clean_instant``, ``policy`` and ``earliest_retained_instant`` say which clean, under
    which retention, and from which instant on time travel still works."""

    def __init__(
        self,
        message: str,
        *,
        table: str | None,
        instant: str | None,
        clean_instant: str,
        policy: str | None,
        earliest_retained_instant: str | None,
    ) -> None:
        super().__init__(message, table=table, instant=instant)
        self.clean_instant = clean_instant
        self.policy = policy
        self.earliest_retained_instant = earliest_retained_instant


class MissingDataFileError(NonRetryableError):
    """A file a completed instant names is missing and no clean deleted it: the table lost
    data outside lakewarden's protocol (a file deleted by hand, a store that lost it)."""

    def __init__(self, message: str, *, table: str | None, instant: str | None, path: str):
        super().__init__(message, table=table, instant=instant)
        self.path = path


def check_not_cleaned(
    state: TimelineState,
    snapshot: Snapshot,
    *,
    table: str | None,
    slices: Iterable[FileSlice] | None = None,
) -> None:
    """Return when every file of ``snapshot`` (or of ``slices`` of it: what a read opens) is
    still there as far as cleans go.

    Raises: InstantCleanedError."""
    cleaned = cleaned_by(state)
    if not cleaned:
        return
    for path in _paths(snapshot.slices.values() if slices is None else slices):
        clean = cleaned.get(path)
        if clean is not None:
            raise _cleaned(clean, path, snapshot.as_of, table)


def _paths(slices: Iterable[FileSlice]) -> Iterable[str]:
    for file_slice in slices:
        yield from file_slice.paths


def _cleaned(
    clean: InstantState, path: str, as_of: str | None, table: str | None
) -> InstantCleanedError:
    plan = clean.plan if isinstance(clean.plan, CleanPlan) else CleanPlan()
    earliest = plan.earliest_retained_instant
    return InstantCleanedError(
        f"the snapshot of table {table!r} as of instant {as_of} was cleaned: "
        f"clean {clean.instant} deleted {path} under the retention "
        f"{plan.policy or 'of the table'}"
        + (f" (the oldest instant still readable is {earliest})" if earliest else "")
        + ". Help: read as of a later instant, or retain more history (a longer cleaning "
        "policy or retention_window_s in table.json, or `lakewarden clean --policy`).",
        table=table,
        instant=as_of,
        clean_instant=clean.instant,
        policy=plan.policy,
        earliest_retained_instant=earliest,
    )


def read_past_cleans(
    load: Callable[[], TimelineState],
    pick: Callable[[TimelineState], Target],
    read: Callable[[Target], Result],
    files: Callable[[Target], Iterable[FileSlice]],
    *,
    as_of: Callable[[Target], str | None],
    table: str | None,
) -> Result:
    """``read(pick(load()))``, past a clean that overtakes it (the module docstring's steps).

    ``pick`` chooses what to read on a timeline (and raises ``InstantCleanedError`` for a
    pinned snapshot a clean reached); ``files`` are the slices ``read`` opens.

    Raises: InstantCleanedError, MissingDataFileError, and what ``pick`` and ``read`` raise."""
    target = pick(load())
    try:
        return read(target)
    except _MISSING as err:
        missed = err
    fresh = load()  # 1.
    _explain(fresh, target, files, as_of, table, missed)  # 2.
    again = pick(fresh)  # 3.
    try:
        return read(again)
    except _MISSING as err:
        last = load()
        _explain(last, again, files, as_of, table, err)
        raise _cleaned_error(last, again, files, as_of, table) from err


def _explain(
    state: TimelineState,
    target: Target,
    files: Callable[[Target], Iterable[FileSlice]],
    as_of: Callable[[Target], str | None],
    table: str | None,
    err: Exception,
) -> None:
    """Return when a clean of ``state`` lists a file of ``target``.

    Raises: MissingDataFileError (none does: ``err`` was not a clean's doing)."""
    cleaned = cleaned_by(state)
    paths = list(_paths(files(target)))
    if any(path in cleaned for path in paths):
        return
    # NotFoundError names its key; pyarrow's FileNotFoundError has the path in its text only.
    key = getattr(err, "key", None)
    path = key or next((p for p in paths if p in str(err)), str(err))
    raise MissingDataFileError(
        f"a file of the snapshot of table {table!r} as of instant {as_of(target)} is "
        f"missing and no clean deleted it ({path}): the table lost data outside lakewarden. "
        "Help: restore the file from a backup or the store's versioning; `lakewarden table "
        "show <uri>` and `lakewarden replay <uri>` show which instant wrote it.",
        table=table,
        instant=as_of(target),
        path=str(path),
    ) from err


def _cleaned_error(
    state: TimelineState,
    target: Target,
    files: Callable[[Target], Iterable[FileSlice]],
    as_of: Callable[[Target], str | None],
    table: str | None,
) -> InstantCleanedError:
    """The named error for a read overtaken twice (``_explain`` found the clean)."""
    cleaned = cleaned_by(state)
    for path in _paths(files(target)):
        clean = cleaned.get(path)
        if clean is not None:
            return _cleaned(clean, path, as_of(target), table)
    raise AssertionError("unreachable: _explain found a clean of a file of the target")


__all__ = ["InstantCleanedError", "MissingDataFileError", "check_not_cleaned", "read_past_cleans"]
