"""A clean as an instant: plan (``requested``), delete, ``completed`` with counts and bytes.

Protocol of ``clean_table``:

1. finish what an interrupted run left: a pending clean is executed as planned (never
   re-planned: files already gone are fine), pending rollbacks are completed;
2. roll back failed writes (``lakewarden.table.clean.rollback``), then cancel the cancellable
   plans past their cancellation policy with no live executor (``expiry``: RFC-79's
   ``request_cancel`` + ``execute_cancel``), which frees what they had pinned;
3. plan: under the table lock, load the timeline, take the retention garbage of the policy
   (``retention``) and the garbage one listing finds (``garbage``: also temporary files of
   crashed writes and strays under ``.lakewarden/``; orphans only when asked),
   and append the ``clean`` instant ``requested`` with the ``CleanPlan``: exactly the files
   and why. The append is validated against the log it lands on: no other clean may be
   pending and nothing may have been appended since the plan was made (else re-plan), so two
   cleaners of one table never run two cleans at once even if the lock failed them. Nothing
   to delete: nothing is appended (a periodic sweep leaves no trace);
4. execute: delete the files (abort the uploads) in parallel;
5. append ``completed`` with the counts and bytes (``CommitStats.clean``) through the
   one completion protocol (``lakewarden.table.completion``): a clean another cleaner
   completed meanwhile is reported done (``CleanResult.already_done``), not an error.

Steps 3-5 are that protocol's: the ``requested`` plan is the fence (it names exactly the files
to delete, each garbage by the retention rules), the deletes come after it, then ``completed``.

``dry_run`` does 1-3 without writing anything: it reports what would be rolled back and
deleted, and the orphans found.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from pydantic import ValidationError

from lakewarden.api.clean_expiry import cancel_plan, expired_plans
from lakewarden.publish.gate import check_removes_published
from lakewarden.publish.retention import trim_after_clean
from lakewarden.storage import NotFoundError, StorageError, is_temporary_key
from lakewarden.table.checkpoint import entry_key
from lakewarden.table.clean.garbage import find_storage_garbage
from lakewarden.table.clean.policy import CleanPolicy
from lakewarden.table.clean.retention import CompletionTime, cleaned_by, plan_retention
from lakewarden.table.clean.rollback import (
    RollbackContext,
    failed_writes,
    finish_rollback,
    roll_back,
    unfinished_rollbacks,
)
from lakewarden.table.completion import CompletionOutcome, complete
from lakewarden.table.coordinator import Lease, LeaseLostError
from lakewarden.table.instant import Action, Instant, Transition
from lakewarden.table.plans import CleanFile, CleanPlan
from lakewarden.table.stats import CleanOutcome, CommitStats
from lakewarden.table.timeline_state import (
    EntryDraft,
    InstantState,
    TimelineEntry,
    TimelineState,
)
from lakewarden.table.transaction import WriteTransaction, requested_payload

log = logging.getLogger(__name__)

DELETE_THREADS = 16
_MAX_PLAN_ATTEMPTS = 5


class _Stale(Exception):
    """The log moved between planning and appending (or a clean is pending): re-plan."""


@dataclass(frozen=True)
class CleanResult:
    """What a clean did (or, with ``dry_run``, would do).

    ``instant``: the clean instant appended (None: nothing to delete, or a dry run);
    ``files``: the plan's files (deleted unless ``dry_run``); ``orphans``: orphan files found
    (in ``files`` too when orphans were asked for); ``rolled_back``: ingestion instants rolled
    back and ``cancelled``: plans aborted (would be, in a dry run); ``resumed``: interrupted
    cleans finished first; ``already_done``: cleans of this run that another cleaner
    completed first (success: their files are gone, their ``completed`` is on the log)."""

    table: str
    policy: CleanPolicy
    dry_run: bool
    instant: str | None = None
    files: tuple[CleanFile, ...] = ()
    orphans: tuple[CleanFile, ...] = ()
    rolled_back: tuple[str, ...] = ()
    cancelled: tuple[str, ...] = ()
    resumed: tuple[str, ...] = ()
    already_done: tuple[str, ...] = ()
    earliest_retained_instant: str | None = None
    files_deleted: int = 0
    bytes_deleted: int = 0
    uploads_aborted: int = 0
    failures: tuple[str, ...] = field(default=())

    @property
    def planned_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)


@dataclass(frozen=True)
class CleanRequest:
    """How to clean: the policy, ``dry_run``, whether to delete orphans, instants known dead
    (from ``HeartbeatExpired``) and the wall clock (epoch seconds; tests inject one)."""

    policy: CleanPolicy
    dry_run: bool = False
    delete_orphans: bool = False
    dead: Collection[str] = ()
    wall_clock: Callable[[], float] = time.time
    # The lock is held while planning (one listing of the table) and for each append.
    lock_ttl_s: float = 15.0
    lock_wait_s: float = 30.0


def clean_table(ctx: RollbackContext, request: CleanRequest) -> CleanResult:
    """Run one clean of the table (the module docstring's steps 1-5).

    Raises: LockTimeoutError, ConcurrentAppendError, CommitStateUnknownError, StorageError
    (a rerun resumes where this one stopped)."""
    state = ctx.timeline.load()
    resumed: list[str] = []
    already: list[str] = []
    if not request.dry_run:  # 1.
        for pending in _pending_cleans(state):
            finished = execute_clean(ctx, pending)
            resumed.append(pending.instant)
            already.extend(finished["already_done"])  # type: ignore[arg-type]
        for rollback in unfinished_rollbacks(state):
            finish_rollback(ctx, rollback)
    rolled_back = []
    now_ms = int(request.wall_clock() * 1000)
    for target in failed_writes(  # 2.
        state, ctx.coordinator, ctx.table_id, request.dead, now_ms=now_ms
    ):
        if request.dry_run or roll_back(ctx, target, "its executor is dead"):
            rolled_back.append(target.instant)
    cancelled = []
    expired = expired_plans(ctx, state, now_ms=now_ms, dead=request.dead)
    for plan, why in list(expired):
        wall_ms = lambda: int(request.wall_clock() * 1000)  # noqa: E731
        if request.dry_run or cancel_plan(ctx, plan, why, wall_ms=wall_ms):
            cancelled.append(plan.instant)
    result = _plan_and_append(ctx, request)  # 3.
    if result.instant is not None:
        inst = ctx.timeline.load().get(result.instant)
        assert inst is not None
        done = execute_clean(ctx, inst)  # 4. and 5.
        already.extend(done.pop("already_done"))  # type: ignore[arg-type]
        result = _with(result, done)
    done = {"rolled_back": tuple(rolled_back), "cancelled": tuple(cancelled)}
    return _with(result, {**done, "resumed": tuple(resumed), "already_done": tuple(already)})


def _pending_cleans(state: TimelineState) -> list[InstantState]:
    return [i for i in state.pending() if i.action is Action.CLEAN]


def _plan(
    ctx: RollbackContext, state: TimelineState, request: CleanRequest
) -> tuple[CleanPlan, tuple[CleanFile, ...]]:
    now_ms = int(request.wall_clock() * 1000)
    policy = request.policy
    retention = plan_retention(state, policy, now_ms=now_ms, completed_ms=_completion_times(ctx))
    skip = set(cleaned_by(state)) | {f.path for f in retention.garbage}
    found = find_storage_garbage(
        ctx.storage,
        state,
        orphan_min_age_s=policy.orphan_min_age_s,
        temp_min_age_s=policy.temp_min_age_s,
        now_ms=now_ms,
        skip=skip,
    )
    files = retention.garbage + found.files
    if request.delete_orphans:
        files += found.orphans
    plan = CleanPlan(
        files=files,
        earliest_retained_instant=retention.earliest_retained_instant,
        policy=policy.describe(),
    )
    return plan, found.orphans


# A completion time that cannot be read counts as "just now": the file is kept this time.
_UNKNOWN_COMPLETION_MS = 2**62


def _completion_times(ctx: RollbackContext) -> CompletionTime:
    """When a write completed: the wall time of its ``completed`` entry (read once per write,
    and only for writes that superseded a file the policy would delete)."""
    known: dict[str, int] = {}

    def completed_ms(write: InstantState) -> int:
        if write.instant not in known:
            known[write.instant] = _completed_entry_ms(ctx, write)
        return known[write.instant]

    return completed_ms


def _completed_entry_ms(ctx: RollbackContext, write: InstantState) -> int:
    if write.completed_seq is None:
        return _UNKNOWN_COMPLETION_MS
    try:
        data = ctx.storage.read(entry_key(write.completed_seq))
        return TimelineEntry.model_validate_json(data).wall_time_ms
    except (StorageError, ValidationError) as err:
        log.warning(
            "completion time of %s unknown, its superseded files stay: %s", write.instant, err
        )
        return _UNKNOWN_COMPLETION_MS


def _plan_and_append(ctx: RollbackContext, request: CleanRequest) -> CleanResult:
    """Step 3: plan against the log and append the plan, re-planning when the log moved."""
    base = CleanResult(table=ctx.table_id, policy=request.policy, dry_run=request.dry_run)
    for _attempt in range(_MAX_PLAN_ATTEMPTS):
        with ctx.coordinator.lock(
            ctx.table_id, ttl_s=request.lock_ttl_s, wait_s=request.lock_wait_s
        ) as lease:
            state = ctx.timeline.load()
            plan, orphans = _plan(ctx, state, request)
            planned = _with(
                base,
                {
                    "files": plan.files,
                    "orphans": orphans,
                    "earliest_retained_instant": plan.earliest_retained_instant,
                },
            )
            if _pending_cleans(state):
                return base  # another cleaner planned one meanwhile: it runs that one
            if request.dry_run or not plan.files:
                return planned
            entry = _append_plan(ctx, lease, state, plan)
            if entry is None:
                continue
        ctx.coordinator.announce(ctx.table_id, entry)
        return _with(planned, {"instant": entry.instant})
    log.info("table %s: the log kept moving while planning a clean; next time", ctx.table_id)
    return base


def _append_plan(
    ctx: RollbackContext, lease: Lease, planned_on: TimelineState, plan: CleanPlan
) -> TimelineEntry | None:
    """Append the plan as the next ``requested`` entry if the log is still the one it was
    planned on (validated on every attempt, after every rebase); None when it moved."""
    payload = requested_payload("clean", plan)

    def draft(current: TimelineState) -> EntryDraft:
        if lease.lost:
            raise LeaseLostError(
                f"the lease on table {ctx.table_id} was lost before the clean plan was "
                "appended; nothing was appended. Help: run the clean again.",
                table=ctx.table_id,
            )
        return EntryDraft(
            instant=str(Instant.next_after(current.last_requested())),
            action=Action.CLEAN,
            transition=Transition.REQUESTED,
            actor=ctx.actor,
            lock_token=lease.token,
            wall_time_ms=time.time_ns() // 1_000_000,
            payload=payload,
        )

    def unchanged(current: TimelineState, _draft: EntryDraft) -> None:
        if current.tail_seq != planned_on.tail_seq:
            raise _Stale()

    try:
        entry, _ = ctx.timeline.append(draft, validate=unchanged)
    except _Stale:
        return None
    return entry


def execute_clean(ctx: RollbackContext, clean: InstantState) -> dict[str, object]:
    """Steps 4 and 5 for the clean instant ``clean`` (resumable: deleting a missing file and
    aborting a finished upload are no-ops). Returns the counts for ``CleanResult``; a clean
    another cleaner completed meanwhile (it found this one pending and finished it) is
    named in ``already_done``: the work is done, nothing is raised.

    Raises: StorageError (the clean stays pending; the next run finishes it),
    RemoveNotPublishedError (likewise: the Delta log does not yet remove a file to delete),
    LockTimeoutError, ConcurrentAppendError, CommitStateUnknownError."""
    plan = clean.plan if isinstance(clean.plan, CleanPlan) else CleanPlan()
    _check_published(ctx, plan.files)
    failures = _delete_all(ctx, plan.files)  # 4.
    if failures:
        raise failures[0]
    deleted = [f for f in plan.files if f.upload_id is None]
    counts = {
        "files_deleted": len(deleted),
        "bytes_deleted": sum(f.size_bytes for f in deleted),
        "uploads_aborted": len(plan.files) - len(deleted),
    }
    txn = WriteTransaction.resume(
        ctx.timeline, ctx.coordinator, ctx.table_id, clean.instant, actor=ctx.actor
    )
    outcome = CleanOutcome(
        files_deleted=counts["files_deleted"],
        bytes_deleted=counts["bytes_deleted"],
        uploads_aborted=counts["uploads_aborted"],
        earliest_retained_instant=plan.earliest_retained_instant or None,
        policy=plan.policy or None,
    )
    stats = CommitStats(operation="clean", clean=outcome)
    completion = complete(txn, stats)  # 5.
    _trim_published_log(ctx)
    done = () if completion is CompletionOutcome.COMPLETED else (clean.instant,)
    return {**counts, "instant": clean.instant, "already_done": done}


def _check_published(ctx: RollbackContext, files: Sequence[CleanFile]) -> None:
    """A table that publishes a Delta log: delete nothing the published log still names
    (``lakewarden.publish.gate``). Raises: RemoveNotPublishedError."""
    check_removes_published(ctx.storage, ctx.timeline, [f.path for f in files])


def _trim_published_log(ctx: RollbackContext) -> None:
    """A table that publishes a Delta log: its log retention follows the clean
    (``lakewarden.publish.retention``; best effort, a failure is logged)."""
    trim_after_clean(ctx.storage, ctx.timeline)


def _delete_all(ctx: RollbackContext, files: Sequence[CleanFile]) -> list[Exception]:
    storage = ctx.storage

    def remove(file: CleanFile) -> Exception | None:
        try:
            if file.upload_id is not None:
                storage.abort_multipart(file.path, file.upload_id)
            elif is_temporary_key(file.path):
                storage.delete_temporary(file.path)
            else:
                storage.delete(file.path)
        except NotFoundError:
            return None
        except Exception as err:  # collected: one failure must not stop the other deletes
            return err
        return None

    if len(files) <= 1:
        results = [remove(f) for f in files]
    else:
        with ThreadPoolExecutor(min(DELETE_THREADS, len(files)), "lw-clean") as pool:
            results = list(pool.map(remove, files))
    return [r for r in results if r is not None]


def _with(result: CleanResult, changes: dict[str, object]) -> CleanResult:
    return replace(result, **changes)  # type: ignore[arg-type]


__all__ = ["DELETE_THREADS", "CleanRequest", "CleanResult", "clean_table", "execute_clean"]
