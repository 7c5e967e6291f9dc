"""Rolling back a plan's partial files, plan kept (RFC-79: "rollback target instant without
deleting plan").

A destructive step, so it runs only after a timeline entry has made every attempt whose files
it deletes uncommittable (ARCHITECTURE, invariant 10), and it checks that entry on the log
before deleting anything:

- the plan has a cancel request (or is aborted): no attempt can ever complete it, every
  attempt's files may go;
- the plan's latest ``inflight`` names ``keep_attempt``: that entry fenced every earlier
  attempt (the state machine refuses their ``completed``), so their files may go and
  ``keep_attempt``'s stay.

Anything else (the plan completed, or another attempt's ``inflight`` is the latest) raises and
deletes nothing. The check needs no lock: the fence is on the log, and a zombie executor
(paused past its claim, in another process, with a lease that expired) can no longer complete
the plan whatever the timing. A completion that landed before the fence makes the fence's
append fail instead, and the caller never gets here.

The files of a plan's attempts are found two ways, so a crash at any point leaves nothing
behind:

1. the committer jobs of its attempts (``_temporary/manifest_<instant>-svc-<attempt>``):
   each is aborted, which deletes what it staged, uploaded or already placed;
2. the base files named ``*_<instant>.parquet`` in the partitions of the plan's file groups
   (placed by a job whose directory is gone, or written without staging).
"""

from __future__ import annotations

import logging

from lakewarden.commit import ManifestCommitter
from lakewarden.commit.layout import TEMPORARY_DIR
from lakewarden.table.files import BaseFileName, MalformedFileNameError, split_key
from lakewarden.table.instant import Transition
from lakewarden.table.timeline_state import InstantState
from lakewarden.tableservice.context import ServiceContext
from lakewarden.tableservice.errors import (
    AttemptFencedError,
    InstantAlreadyCompletedError,
    RollbackNotFencedError,
    UnknownPlanError,
)
from lakewarden.tableservice.output import service_job_id, service_job_prefix

__all__ = ["RolledBack", "roll_back_attempts"]

log = logging.getLogger(__name__)

_JOB_DIR = "manifest_"


class RolledBack:
    """What a rollback removed: the jobs aborted and the files deleted."""

    def __init__(self) -> None:
        self.jobs: list[str] = []
        self.files: list[str] = []


def roll_back_attempts(
    ctx: ServiceContext, instant: str, *, keep_attempt: int | None = None
) -> RolledBack:
    """Delete every file of the plan's attempts but ``keep_attempt``'s (the module
    docstring's fence check first, then steps 1 and 2); the plan stays on the timeline.

    Raises: InstantAlreadyCompletedError, AttemptFencedError (``keep_attempt`` is fenced:
    nothing deleted), RollbackNotFencedError (no entry fences the attempts: nothing deleted),
    UnknownPlanError, StorageError."""
    done = RolledBack()
    keep_job = service_job_id(instant, keep_attempt) if keep_attempt is not None else None
    plan = _fenced(ctx, instant, keep_attempt)
    for job_id in _attempt_jobs(ctx, instant):  # 1.
        if job_id != keep_job:
            ManifestCommitter(ctx.storage, job_id).abort_job(
                force=True, reason=f"rollback of plan {instant}'s earlier attempt"
            )
            done.jobs.append(job_id)
    for key in _attempt_files(ctx, plan, keep_attempt):  # 2.
        ctx.storage.delete(key)
        done.files.append(key)
    if done.jobs or done.files:
        log.info(
            "plan %s: rolled back %d jobs, %d files",
            instant,
            len(done.jobs),
            len(done.files),
            extra={"table": ctx.table_id, "instant": instant},
        )
    return done


def _fenced(ctx: ServiceContext, instant: str, keep_attempt: int | None) -> InstantState:
    """The plan, when the log has the entry that makes the attempts to delete uncommittable.

    Raises: InstantAlreadyCompletedError, AttemptFencedError, RollbackNotFencedError,
    UnknownPlanError."""
    plan = ctx.timeline.load().get(instant)
    if plan is None:
        raise UnknownPlanError(
            f"instant {instant} is not on the timeline of table {ctx.table_id}.",
            table=ctx.table_id,
            instant=instant,
        )
    if plan.state is Transition.COMPLETED:
        raise InstantAlreadyCompletedError(
            f"plan {instant} of table {ctx.table_id} completed: its files are the table's now; "
            "nothing was rolled back.",
            table=ctx.table_id,
            instant=instant,
        )
    if plan.state in (Transition.CANCEL_REQUESTED, Transition.ABORTED):
        return plan  # no attempt can complete it any more
    if keep_attempt is not None and plan.attempt == keep_attempt:
        return plan  # this attempt's inflight fenced every other one
    if keep_attempt is not None and plan.attempt is not None:
        raise AttemptFencedError(
            f"plan {instant} of table {ctx.table_id}: attempt {keep_attempt} was fenced by "
            f"attempt {plan.attempt} (its inflight is the latest); nothing was rolled back. "
            "Help: let that attempt finish the plan.",
            table=ctx.table_id,
            instant=instant,
            attempt=keep_attempt,
            fenced_by=plan.attempt,
        )
    raise RollbackNotFencedError(
        f"plan {instant} of table {ctx.table_id} is {plan.state} and no timeline entry fences "
        "its attempts (a cancel request, or an inflight naming the attempt that keeps its "
        "files): deleting their files could delete a completion's. Nothing was rolled back. "
        "Help: request the plan's cancellation first, or run it (the executor fences the "
        "earlier attempts itself).",
        table=ctx.table_id,
        instant=instant,
    )


def _attempt_jobs(ctx: ServiceContext, instant: str) -> list[str]:
    prefix = f"{TEMPORARY_DIR}{_JOB_DIR}{service_job_prefix(instant)}"
    jobs: set[str] = set()
    for info in ctx.storage.list(prefix):
        job_dir = info.key[len(TEMPORARY_DIR) :].split("/", 1)[0]
        jobs.add(job_dir[len(_JOB_DIR) :])
    return sorted(jobs)


def _attempt_files(ctx: ServiceContext, plan: InstantState, keep_attempt: int | None) -> list[str]:
    partitions = sorted({g.partition_path for g in plan.plan_file_groups})
    found: list[str] = []
    for partition in partitions:
        prefix = f"{partition}/" if partition else ""
        for info in ctx.storage.list(prefix):
            directory, name = split_key(info.key)
            if directory != partition:
                continue  # a deeper partition level, or the table's own metadata
            try:
                parsed = BaseFileName.parse(name)
            except MalformedFileNameError:
                continue
            if parsed.instant == plan.instant and parsed.write_token.stage_id != keep_attempt:
                found.append(info.key)
    return found
