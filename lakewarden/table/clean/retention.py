"""Which files of completed writes a clean may delete under a policy (pure; invariant 6).

The completed writes (commit, deltacommit, compaction, clustering; cleans and rollbacks change
no snapshot) are numbered 0..n-1 in completion order; the snapshot as of write ``k`` is theirs
folded up to ``k`` (``lakewarden.table.snapshot``). Every file they name has a *life*: the
index of the write that added it and the index of the first snapshot that no longer holds it
(its slice was superseded or its file group replaced), None while the latest snapshot holds it.
A snapshot as of ``k`` needs exactly the files alive at ``k``.

A file is kept (invariant 6) when

1. the latest snapshot holds it;
2. the policy keeps it: alive at or after the retention boundary (keep-latest-commits,
   keep-latest-by-hours), or one of the newest N slices of its file group
   (keep-latest-file-versions);
3. a pending instant needs it: alive in the snapshot the instant builds on (its ``requested``
   entry's, or a service plan's ``last_completed_instant``): "never past the earliest pending
   instant";
4. a pending compaction or clustering plan rewrites its file group (whatever slice: the plan's
   executor reads them);
5. an earlier clean already lists it (it is gone or going; listing it again would make every
   sweep append a clean);
6. it was superseded less than ``retention_window_s`` ago (the completion of the write that
   superseded it, by that write's ``completed`` entry), whatever the policy: a reader that
   planned its files before that write is not cut off while it reads (invariant 11).

Everything else a completed write named is garbage, with the rule that made it so. The clean's
``earliest_retained_instant`` is the oldest write from which on every snapshot is intact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lakewarden.table.clean.policy import CleaningPolicy, CleanPolicy
from lakewarden.table.files import LogFileName, MalformedFileNameError, is_log_file, split_key
from lakewarden.table.instant import (
    INGESTION_ACTIONS,
    TABLE_SERVICE_ACTIONS,
    Action,
    Instant,
)
from lakewarden.table.plans import CleanFile, CleanPlan, ServicePlan
from lakewarden.table.stats import FileGroupId
from lakewarden.table.timeline_state import InstantState, TimelineState

DATA_ACTIONS = INGESTION_ACTIONS | TABLE_SERVICE_ACTIONS
_MS_PER_HOUR = 3_600_000


@dataclass(frozen=True, slots=True)
class FileLife:
    """One file a completed write named, and the snapshots that hold it."""

    path: str
    size_bytes: int
    file_group: FileGroupId
    slice_no: int  # its slice's ordinal in its file group (0: the oldest)
    added: int  # the write (index) that added it
    removed: int | None  # the first write whose snapshot lacks it; None: the latest holds it

    def alive_at(self, index: int) -> bool:
        return self.added <= index and (self.removed is None or index < self.removed)


@dataclass(frozen=True)
class RetentionPlan:
    """The garbage of completed writes, and from which write on every snapshot is intact."""

    garbage: tuple[CleanFile, ...]
    earliest_retained_instant: str | None


def data_writes(state: TimelineState) -> list[InstantState]:
    """The completed writes that build snapshots, in completion order."""
    return [i for i in state.completed() if i.action in DATA_ACTIONS]


@dataclass
class _Slice:
    base_instant: str
    slice_no: int
    paths: list[str]


def file_lives(writes: Sequence[InstantState]) -> list[FileLife]:
    """The life of every file ``writes`` name (the fold of ``snapshot.build_snapshot``)."""
    current: dict[FileGroupId, _Slice] = {}
    slices_made: dict[FileGroupId, int] = {}
    added: dict[str, tuple[int, int, FileGroupId, int]] = {}  # path -> size, index, group, slice
    removed: dict[str, int] = {}

    def end(group: FileGroupId, index: int) -> None:
        ended = current.pop(group, None)
        for path in ended.paths if ended else ():
            removed[path] = index

    def start(group: FileGroupId, base_instant: str) -> _Slice:
        number = slices_made.get(group, 0)
        slices_made[group] = number + 1
        current[group] = _Slice(base_instant, number, [])
        return current[group]

    for index, write in enumerate(writes):
        if write.commit is None:
            continue
        for group in write.commit.replaced_file_groups:
            end(group, index)
        for stat in write.commit.write_stats:
            group, base = stat.file_group, _base_instant(stat.path, write.instant)
            slice_ = current.get(group)
            if slice_ is None or base is None or slice_.base_instant != base:
                end(group, index)
                slice_ = start(group, base or write.instant)
            if stat.path not in slice_.paths:
                slice_.paths.append(stat.path)
            # A log file appended in place is named again by later writes: alive since first.
            first = added[stat.path][1] if stat.path in added else index
            added[stat.path] = (stat.size_bytes, first, group, slice_.slice_no)
    return [
        FileLife(path, size, group, slice_no, index, removed.get(path))
        for path, (size, index, group, slice_no) in added.items()
    ]


def _base_instant(path: str, instant: str) -> str | None:
    """The slice a file belongs to: a log file joins its base instant's; None: a new slice."""
    name = split_key(path)[1]
    if not is_log_file(name):
        return None
    try:
        return LogFileName.parse(name).base_instant
    except MalformedFileNameError:
        return None


def cleaned_by(state: TimelineState) -> dict[str, InstantState]:
    """Every file a clean lists (pending cleans included: they delete as they go), with the
    clean that lists it."""
    cleaned: dict[str, InstantState] = {}
    for inst in state.instants.values():
        if inst.action is Action.CLEAN and isinstance(inst.plan, CleanPlan):
            for file in inst.plan.files:
                if file.upload_id is None:
                    cleaned.setdefault(file.path, inst)
    return cleaned


CompletionTime = Callable[[InstantState], int]


def instant_time_ms(write: InstantState) -> int:
    """When ``write`` started (its instant time): a lower bound of when it completed."""
    return Instant(write.instant).epoch_ms


def plan_retention(
    state: TimelineState,
    policy: CleanPolicy,
    *,
    now_ms: int,
    completed_ms: CompletionTime = instant_time_ms,
) -> RetentionPlan:
    """The garbage of completed writes under ``policy`` at wall time ``now_ms``.
    ``completed_ms``: when a write completed (epoch ms), asked only of writes that superseded
    a file the policy would delete (rule 6); the clean reads their ``completed`` entries."""
    writes = data_writes(state)
    if not writes:
        return RetentionPlan((), None)
    lives = file_lives(writes)
    boundary = _boundary(writes, policy, now_ms)
    versions = _slices_per_group(lives)
    protected = _pending_bases(state, writes)
    protected_groups = {
        group
        for inst in state.pending_plans()
        if isinstance(inst.plan, ServicePlan)
        for group in inst.plan.file_groups
    }
    already = cleaned_by(state)
    garbage: list[tuple[FileLife, str]] = []
    for life in lives:
        if life.removed is None or life.path in already:  # 1. and 5.
            continue
        if policy.policy is CleaningPolicy.KEEP_LATEST_FILE_VERSIONS:  # 2.
            newest = versions[life.file_group] - policy.file_versions_retained
            if life.slice_no >= newest:
                continue
            reason = (
                f"version {life.slice_no + 1} of {versions[life.file_group]} of file group "
                f"{life.file_group}: outside {policy.describe()}"
            )
        else:
            if life.removed > boundary:
                continue
            reason = (
                f"superseded by {writes[life.removed].instant}, not after the retention "
                f"boundary {writes[boundary].instant}: outside {policy.describe()}"
            )
        if any(life.alive_at(i) for i in protected) or life.file_group in protected_groups:
            continue  # 3. and 4.
        if _superseded_recently(writes[life.removed], policy, now_ms, completed_ms):
            continue  # 6.
        garbage.append((life, reason))
    earliest = max((life.removed or 0 for life, _ in garbage), default=None)
    return RetentionPlan(
        tuple(CleanFile(path=g.path, reason=r, size_bytes=g.size_bytes) for g, r in garbage),
        writes[earliest].instant if earliest is not None else None,
    )


def _boundary(writes: Sequence[InstantState], policy: CleanPolicy, now_ms: int) -> int:
    """The oldest write whose snapshot the policy keeps (commits and hours policies)."""
    if policy.policy is CleaningPolicy.KEEP_LATEST_COMMITS:
        return max(0, len(writes) - policy.commits_retained)
    if policy.policy is CleaningPolicy.KEEP_LATEST_BY_HOURS:
        cutoff = now_ms - int(policy.hours_retained * _MS_PER_HOUR)
        # The table as it was at the cutoff stays readable: the last write at or before it.
        before = [i for i, w in enumerate(writes) if Instant(w.instant).epoch_ms <= cutoff]
        return before[-1] if before else 0
    return 0


def _superseded_recently(
    by: InstantState, policy: CleanPolicy, now_ms: int, completed_ms: CompletionTime
) -> bool:
    if policy.retention_window_s <= 0:
        return False
    superseded_ms = max(completed_ms(by), instant_time_ms(by))
    return now_ms - superseded_ms < policy.retention_window_s * 1000


def _slices_per_group(lives: Sequence[FileLife]) -> dict[FileGroupId, int]:
    counts: dict[FileGroupId, int] = {}
    for life in lives:
        counts[life.file_group] = max(counts.get(life.file_group, 0), life.slice_no + 1)
    return counts


def _pending_bases(state: TimelineState, writes: Sequence[InstantState]) -> set[int]:
    """The writes whose snapshots pending instants build on."""
    position = {w.instant: i for i, w in enumerate(writes)}
    bases: set[int] = set()
    for inst in state.pending():
        before = [i for i, w in enumerate(writes) if (w.completed_seq or 0) < inst.requested_seq]
        if before:
            bases.add(before[-1])
        if isinstance(inst.plan, ServicePlan) and inst.plan.last_completed_instant in position:
            bases.add(position[inst.plan.last_completed_instant])
    return bases


__all__ = [
    "DATA_ACTIONS",
    "CompletionTime",
    "FileLife",
    "RetentionPlan",
    "cleaned_by",
    "data_writes",
    "file_lives",
    "instant_time_ms",
    "plan_retention",
]
