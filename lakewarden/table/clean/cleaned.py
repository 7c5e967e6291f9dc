"""Time travel past a clean: a named error instead of a missing file.

A clean deletes files only older snapshots hold. Reading such a snapshot
(``lakewarden.read(uri, as_of=I)``) would otherwise fail somewhere inside pyarrow with a
``FileNotFoundError`` (or, worse, half a result on a store that lists lazily), so the read
checks the snapshot's files against the files every clean instant lists first and raises
``InstantCleanedError`` naming the clean, its policy and the oldest instant still readable.
"""

from __future__ import annotations

from lakewarden.errors import NonRetryableError
from lakewarden.table.clean.retention import cleaned_by
from lakewarden.table.plans import CleanPlan
from lakewarden.table.snapshot import Snapshot
from lakewarden.table.timeline_state import TimelineState


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


def check_not_cleaned(state: TimelineState, snapshot: Snapshot, *, table: str | None) -> None:
    """Return when every file of ``snapshot`` is still there as far as cleans go.

    Raises: InstantCleanedError."""
    cleaned = cleaned_by(state)
    if not cleaned:
        return
    for file_slice in snapshot.slices.values():
        for path in file_slice.paths:
            clean = cleaned.get(path)
            if clean is None:
                continue
            plan = clean.plan if isinstance(clean.plan, CleanPlan) else CleanPlan()
            earliest = plan.earliest_retained_instant
            raise InstantCleanedError(
                f"the snapshot of table {table!r} as of instant {snapshot.as_of} was cleaned: "
                f"clean {clean.instant} deleted {path} under the retention "
                f"{plan.policy or 'of the table'}"
                + (f" (the oldest instant still readable is {earliest})" if earliest else "")
                + ". Help: read as of a later instant, or retain more history "
                "(a longer cleaning policy in table.json or `lakewarden clean --policy`).",
                table=table,
                instant=snapshot.as_of,
                clean_instant=clean.instant,
                policy=plan.policy,
                earliest_retained_instant=earliest,
            )


__all__ = ["InstantCleanedError", "check_not_cleaned"]
