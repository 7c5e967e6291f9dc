"""Executing a table-service plan in-process: ``run_table_service``.

Protocol (RFC-79's table-service flow, with at most one executor per plan):

1. claim the plan under the table lock: a live heartbeat of another executor refuses with
   ``PlanAlreadyExecutingError`` naming it; otherwise this executor starts beating (held to
   the end) (``claim``);
2. the plan has a cancel request: short-circuit (RFC-79 "short circuit"): roll back every
   attempt's files and append ``aborted``, rewriting nothing (also when the request lands
   between the claim and step 4, whose ``inflight`` it makes illegal);
3. append ``inflight`` naming this attempt (the plan's file groups as the workload): the
   *fence*. From requested it starts the plan; from inflight (a retry) it makes every earlier
   attempt uncommittable, however late a stalled one wakes up (the state machine refuses a
   ``completed`` that names a fenced attempt);
4. only then roll back the partial files of earlier attempts, the plan kept (``rollback``,
   which checks the fence on the log first);
5. the strategy rewrites the plan's input slices into this attempt's files, which are put in
   place, still invisible: in this process (``InProcessExecution``: ``output``), or, from
   ``lakewarden.spark.run_table_service``, as a Spark job of one task per file group whose
   accepted task attempts the driver commits (an ``Execution`` is the one pluggable step);
   the records it set aside for the error table (``unfit``) are spooled for this attempt
   before step 6, and ``Table.run_table_service`` commits them into the error table once
   the plan completed (``lakewarden.errortable.divert.settle``);
6. pre-commit under the lock (``precommit``): a cancel request, or, for a cancellable plan,
   a conflicting ingestion completed meanwhile -> delete the files and append ``aborted``;
   else ``completed`` (a replace: the old slices leave the snapshot).

A failure in 5-6 deletes this attempt's files (best effort) and re-raises; the plan stays
pending for the next attempt (a non-cancellable plan is executed to completion; a cancellable
one may also be cancelled).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from lakewarden.errors import CommitStateUnknownError, LakewardenError
from lakewarden.errortable.divert import spool_key
from lakewarden.storage import NotFoundError
from lakewarden.table.cancel import InstantAlreadyCompletedError
from lakewarden.table.clean.cleaned import MissingDataFileError
from lakewarden.table.completion import CompletionOutcome, reconcile
from lakewarden.table.instant import Transition
from lakewarden.table.plans import ServicePlan
from lakewarden.table.snapshot import Snapshot, snapshot_as_of_request
from lakewarden.table.stats import CommitStats, WorkloadProfile
from lakewarden.table.timeline import IllegalTransitionError, TimelineEntry
from lakewarden.table.transaction import WriteTransaction
from lakewarden.tableservice.cancel import finish_abort
from lakewarden.tableservice.claim import claim
from lakewarden.tableservice.context import ServiceContext
from lakewarden.tableservice.errors import AttemptFencedError, ExecutorOutputLostError
from lakewarden.tableservice.output import AttemptOutput, new_attempt
from lakewarden.tableservice.plan_state import find_plan, service_plan
from lakewarden.tableservice.precommit import Verdict, complete_or_cancel
from lakewarden.tableservice.rollback import roll_back_attempts
from lakewarden.tableservice.strategy import RewriteJob, TableServiceStrategy, strategy_for
from lakewarden.tableservice.unfit import spool_failed

__all__ = [
    "Execution",
    "ExecutionFactory",
    "InProcessExecution",
    "ServiceOutcome",
    "ServiceRun",
    "run_table_service",
]

log = logging.getLogger(__name__)


class ServiceOutcome(StrEnum):
    COMPLETED = "completed"
    ABORTED = "aborted"  # this run aborted the plan (cancel request or lost to ingestion)
    ALREADY_ABORTED = "already_aborted"


@dataclass(frozen=True)
class ServiceRun:
    """How ``run_table_service`` ended: the outcome, the statistics of a completion, why the
    plan was aborted, the attempt number and what the run rolled back of earlier attempts."""

    instant: str
    outcome: ServiceOutcome
    attempt: int
    stats: CommitStats | None = None
    reason: str | None = None
    rolled_back_files: tuple[str, ...] = field(default=())
    short_circuited: bool = False


class Execution(Protocol):
    """Step 5 of one executor attempt: where the rewrite runs and how its files are placed."""

    def rewrite(
        self, strategy: TableServiceStrategy, plan: ServicePlan, base: Snapshot
    ) -> CommitStats:
        """Write the plan's output and put it at its final keys (still invisible), spool the
        records it set aside for the error table (``unfit.spool_failed``); return the
        statistics that name exactly the placed files and count exactly those records."""
        ...

    def discard(self) -> None:
        """Delete everything this attempt wrote or staged (best effort)."""
        ...


# Builds an attempt's execution from the table, the plan instant and the attempt number.
ExecutionFactory = Callable[[ServiceContext, str, int], Execution]


class InProcessExecution:
    """The rewrite in this process: ``strategy.rewrite`` into an ``AttemptOutput``."""

    def __init__(self, ctx: ServiceContext, instant: str, attempt: int) -> None:
        self.ctx = ctx
        self.instant = instant
        self.output = AttemptOutput(ctx.storage, ctx.config, instant, attempt)

    def rewrite(
        self, strategy: TableServiceStrategy, plan: ServicePlan, base: Snapshot
    ) -> CommitStats:
        """Raises: what the strategy raises, StageFailedError, StatisticsMismatchError,
        StorageError."""
        job = RewriteJob(
            self.ctx.storage,
            self.ctx.config,
            self.instant,
            plan,
            base,
            self.output,
            attempt=self.output.attempt,
        )
        stats = strategy.rewrite(job)
        self.output.place(stats)
        spool_failed(self.ctx.storage, self.instant, self.output.attempt, job.failed, stats)
        return stats

    def discard(self) -> None:
        self.output.discard()


def run_table_service(
    ctx: ServiceContext, instant: str, *, execution: ExecutionFactory = InProcessExecution
) -> ServiceRun:
    """Execute the plan ``instant`` (steps in the module docstring); ``execution`` runs step 5
    (default: in this process).

    Raises: UnknownPlanError, NotATableServicePlanError, InstantAlreadyCompletedError,
    PlanAlreadyExecutingError, AttemptFencedError (a newer attempt fenced this one: nothing
    completed), InstantAlreadyCompletedError also when another attempt completed the plan
    and a clean removed its inputs mid-run, MissingDataFileError (an input of the pending
    plan is gone: lost outside the protocol), UnknownStrategyError, WriteConflictError subclasses (a
    non-cancellable plan that lost to another plan), ExecutorOutputLostError,
    HeartbeatLostError, LockTimeoutError, StorageError, CommitStateUnknownError."""
    attempt = new_attempt()
    current = find_plan(ctx, ctx.timeline.load(), instant)
    if current.state is Transition.ABORTED:
        return ServiceRun(instant, ServiceOutcome.ALREADY_ABORTED, attempt, reason=current.reason)
    with claim(ctx, instant) as current:  # 1.
        if current.state is Transition.ABORTED:
            return ServiceRun(
                instant, ServiceOutcome.ALREADY_ABORTED, attempt, reason=current.reason
            )
        if current.state is Transition.CANCEL_REQUESTED:  # 2.
            reason = current.reason or "cancel requested"
            finish_abort(ctx, instant, reason=reason)
            return ServiceRun(
                instant, ServiceOutcome.ABORTED, attempt, reason=reason, short_circuited=True
            )
        plan = service_plan(current)
        txn = WriteTransaction.resume(
            ctx.timeline, ctx.coordinator, ctx.table_id, instant, actor=ctx.actor
        )
        workload = WorkloadProfile(
            operation=current.operation or "", file_groups=plan.file_groups, attempt=attempt
        )
        try:
            txn.inflight(workload)  # 3.
        except IllegalTransitionError:
            # The claim's lock was released before ``inflight``: a cancel request that
            # landed in between ends the plan here as step 2 would have.
            why = _cancel_requested_meanwhile(ctx, instant)
            if why is None:
                raise
            finish_abort(ctx, instant, reason=why)
            return ServiceRun(
                instant, ServiceOutcome.ABORTED, attempt, reason=why, short_circuited=True
            )
        rolled = roll_back_attempts(ctx, instant, keep_attempt=attempt)  # 4.
        strategy = strategy_for(plan, table=ctx.table_id, instant=instant)
        run = execution(ctx, instant, attempt)
        try:
            state = ctx.timeline.load()
            base = snapshot_as_of_request(state, instant, table=ctx.config.name)
            stats = run.rewrite(strategy, plan, base).model_copy(update={"attempt": attempt})
            _check_spooled(ctx, instant, attempt, stats)
            verdict = complete_or_cancel(ctx, instant, stats)  # 5., 6.
        except CommitStateUnknownError:
            # The completion may have landed: the log decides (the one completion protocol's
            # step 4), and the files stay either way (a later attempt fences this one before
            # its rollback deletes them).
            outcome = reconcile(ctx.timeline, instant, lambda e: _names(e, attempt))
            if outcome is not CompletionOutcome.COMPLETED:
                raise
            verdict = Verdict(completed=True)
        except (FileNotFoundError, NotFoundError) as err:
            _discard(run, instant, attempt)
            raise _input_gone(ctx, instant, attempt, err) from err
        except Exception:
            _discard(run, instant, attempt)
            raise
        if verdict.completed:
            return ServiceRun(
                instant,
                ServiceOutcome.COMPLETED,
                attempt,
                stats=stats,
                rolled_back_files=tuple(rolled.files),
            )
        finish_abort(ctx, instant, reason=verdict.reason)
        return ServiceRun(
            instant,
            ServiceOutcome.ABORTED,
            attempt,
            reason=verdict.reason,
            rolled_back_files=tuple(rolled.files),
        )


def _input_gone(ctx: ServiceContext, instant: str, attempt: int, err: Exception) -> LakewardenError:
    """The named error for an input file of the plan gone while this attempt read it. The
    clean keeps a pending plan's inputs, so they go only once a newer attempt completed the
    plan (its inputs are then superseded), or outside lakewarden's protocol."""
    plan = ctx.timeline.load().get(instant)
    if plan is not None and plan.state is Transition.COMPLETED:
        return InstantAlreadyCompletedError(
            f"plan {instant} of table {ctx.table_id} was completed by another attempt while "
            f"attempt {attempt} ran, and a clean has since removed the input files it "
            f"superseded ({err}); this attempt's output was discarded. Help: nothing to do: "
            "the plan is done.",
            table=ctx.table_id,
            instant=instant,
        )
    if plan is not None and plan.attempt is not None and plan.attempt != attempt:
        return AttemptFencedError(
            f"plan {instant} of table {ctx.table_id}: attempt {attempt} was fenced by attempt "
            f"{plan.attempt} and an input file is gone ({err}); this attempt's output was "
            "discarded. Help: let that attempt finish the plan.",
            table=ctx.table_id,
            instant=instant,
            attempt=attempt,
            fenced_by=plan.attempt,
        )
    return MissingDataFileError(
        f"an input file of plan {instant} of table {ctx.table_id} is missing while the plan "
        f"is pending ({err}): no clean deletes a pending plan's inputs, so the table lost "
        "data outside lakewarden. Help: restore the file from a backup or the store's "
        "versioning; `lakewarden replay <uri>` shows which instant wrote it.",
        table=ctx.table_id,
        instant=instant,
        path=str(err),
    )


def _check_spooled(ctx: ServiceContext, instant: str, attempt: int, stats: CommitStats) -> None:
    """No ``completed`` counts failed records that no spool holds (whatever the execution).

    Raises: ExecutorOutputLostError."""
    if stats.failed_records and not ctx.storage.exists(spool_key(instant, attempt)):
        raise ExecutorOutputLostError(
            f"plan {instant} of table {ctx.table_id}: attempt {attempt} set aside "
            f"{stats.failed_records} record(s) for the error table, but their spool "
            f"{spool_key(instant, attempt)} is not there; nothing was completed. Help: run "
            "the plan again (its next attempt sets them aside again).",
            table=ctx.table_id,
            instant=instant,
        )


def _names(entry: TimelineEntry, attempt: int) -> bool:
    """Whether a ``completed`` entry is this attempt's."""
    return entry.payload.get("attempt") == attempt


def _cancel_requested_meanwhile(ctx: ServiceContext, instant: str) -> str | None:
    """The cancel request's reason when the plan is now ``cancel_requested``, else None."""
    mine = ctx.timeline.load().get(instant)
    if mine is None or mine.state is not Transition.CANCEL_REQUESTED:
        return None
    return mine.reason or "cancel requested"


def _discard(run: Execution, instant: str, attempt: int) -> None:
    try:
        run.discard()
    except Exception as err:  # the next attempt's rollback (or the cancel) finds them
        log.warning("plan %s: deleting attempt %d's files failed: %s", instant, attempt, err)
