"""What a Spark read of a table covers, fixed once on the driver.

Both read paths plan with ``plan_read``: the files Spark's own Parquet reader reads
(``lakewarden.spark.read``) and the Python data source (``spark.read.format("lakewarden")``).
A snapshot read is the base files of the slices as of ``as_of``; an incremental read
(``since``) is the latest slices the instants completed after ``since`` wrote, keeping only
the records whose ``_lw_commit_time`` is one of those instants (the rule of
``Table.changes``). A merge-on-read slice with log blocks must be merged in Python; a slice
without them is a plain Parquet file like a copy-on-write one.
"""

from __future__ import annotations

from dataclasses import dataclass

from lakewarden.storage import Storage
from lakewarden.table.clean.cleaned import check_not_cleaned
from lakewarden.table.config import TableConfig
from lakewarden.table.snapshot import FileSlice, build_snapshot, changes_since
from lakewarden.table.stats import WriteStat
from lakewarden.table.timeline import Timeline


@dataclass(frozen=True)
class ReadPlan:
    """The files of one read. ``as_of`` is the last completed instant the plan covers (None:
    nothing is completed), so a second planner given it sees the same instants."""

    as_of: str | None
    files: tuple[WriteStat, ...]
    merged: tuple[FileSlice, ...]
    # Incremental reads: keep only the records these instants wrote (None: every record).
    instants: tuple[str, ...] | None


def plan_read(
    storage: Storage,
    config: TableConfig,
    *,
    as_of: str | None = None,
    since: str | None = None,
    until: str | None = None,
) -> ReadPlan:
    """The plan of a snapshot read (``as_of``, default the latest) or of an incremental one
    (``since``, up to ``until``, default the latest).

    Raises: InstantNotCompletedError (``as_of``, ``since`` or ``until`` is not a completed
    instant of the table), InstantCleanedError (a clean deleted files of the ``as_of``
    snapshot, or of the changes up to ``until``), TimelineError."""
    state = Timeline(storage, table=config.name).load()
    completed = state.completed()
    instants: tuple[str, ...] | None
    if since is not None:
        changes = changes_since(completed, since, until)
        check_not_cleaned(state, changes.snapshot, table=config.name, slices=changes.slices())
        slices, instants, last = changes.slices(), changes.instants, changes.snapshot.as_of
    else:
        snapshot = build_snapshot(completed, as_of)
        if as_of is not None:
            # A clean deleted files of an old snapshot: say so now, as Table.read does, not
            # as a missing file in a task.
            check_not_cleaned(state, snapshot, table=config.name)
        slices, instants, last = list(snapshot.slices.values()), None, snapshot.as_of
    merged = tuple(s for s in slices if s.log_files)
    files = sorted(
        (s.base_file for s in slices if s.base_file is not None and not s.log_files),
        key=lambda s: (s.file_group.partition_path, s.file_group.file_id),
    )
    return ReadPlan(as_of=last, files=tuple(files), merged=merged, instants=instants)
