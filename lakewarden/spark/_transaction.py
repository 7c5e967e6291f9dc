"""``WriteTransaction`` with what Spark writes add: micro-batches that commit exactly once.

A streaming micro-batch is identified by ``BatchKey`` (query id, run id, batch id), taken from
the task's local properties (``sql.streaming.queryId``, ``streaming.sql.batchId`` and the job
group, which Structured Streaming sets to the run id). Two rules make a restarted query commit
every batch exactly once:

- **one instant per run and batch.** The tasks of a batch find or open its instant with
  ``begin_batch``: the ``requested`` entry names the key in its ``JobPlan`` (``batch``: a
  ``MicroBatch``, delta-rs's ``Txn{app_id, version}``), and the append's
  validator (re-run after every rebase) refuses to open a second one, so racing tasks in
  different processes agree on one instant.
- **one completion per query and batch.** The commit records the key in the ``completed``
  payload (``CommitStats.batch``) and completes with the ``once`` rule of
  ``lakewarden.table.job_commit`` (query id and batch id), whether the driver or the
  job-committer service runs it: after the heartbeat check and the conflict rules, and again
  after every rebase, it refuses when an instant with the same query id and batch id
  completed already (``BatchAlreadyCommittedError``, an ``AlreadyCommittedError``); there is
  no other way to complete a micro-batch's instant. A restarted run re-executes the batches
  Spark had not recorded as committed; if lakewarden committed one of them before the crash,
  the rerun finds it and commits nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from lakewarden.table.coordinator import Coordinator, LeaseLostError
from lakewarden.table.instant import Action, Instant, Transition
from lakewarden.table.job_commit import AlreadyCommittedError
from lakewarden.table.plans import JobPlan
from lakewarden.table.stats import MicroBatch
from lakewarden.table.timeline import InstantState, Timeline, TimelineState
from lakewarden.table.timeline_state import EntryDraft
from lakewarden.table.transaction import WriteTransaction, requested_payload


class BatchAlreadyCommittedError(AlreadyCommittedError):
    """An instant of this streaming query completed this micro-batch already."""


@dataclass(frozen=True)
class BatchKey:
    """One micro-batch of one run of a streaming query."""

    query_id: str
    run_id: str
    batch_id: int
    checkpoint: str = ""

    @property
    def micro_batch(self) -> MicroBatch:
        return MicroBatch(
            query_id=self.query_id,
            run_id=self.run_id,
            batch_id=self.batch_id,
            checkpoint=self.checkpoint,
        )

    def plan(self, job_id: str) -> JobPlan:
        """The plan of the batch's instant: the job and the micro-batch it writes."""
        return JobPlan(job_id=job_id, batch=self.micro_batch)


def completed_batch(state: TimelineState, key: BatchKey) -> InstantState | None:
    """The completed instant of ``key``'s query and batch (any run), if any."""
    for inst in state.completed():
        batch = inst.commit.batch if inst.commit is not None else None
        if batch is not None and (batch.query_id, batch.batch_id) == (key.query_id, key.batch_id):
            return inst
    return None


def pending_batch(state: TimelineState, key: BatchKey) -> tuple[str, str] | None:
    """(instant, job id) of the pending instant opened for ``key`` (this run), if any."""
    wanted = key.micro_batch
    for inst in state.pending():
        plan = inst.job_plan
        if plan is not None and plan.job_id is not None and plan.batch == wanted:
            return inst.instant, plan.job_id
    return None


class _Found(Exception):
    """Raised by the validator to stop an append: the batch's instant exists."""

    def __init__(self, instant: str, job_id: str) -> None:
        super().__init__(instant)
        self.instant, self.job_id = instant, job_id


class SparkTransaction(WriteTransaction):
    """A write transaction of the Spark data source."""

    @classmethod
    def begin_batch(
        cls,
        timeline: Timeline,
        coordinator: Coordinator,
        table_id: str,
        *,
        key: BatchKey,
        job_id: str,
        operation: str,
        actor: str,
        action: Action = Action.COMMIT,
    ) -> tuple[str, str]:
        """The (instant, job id) of ``key``: the pending one, or a new ``requested`` entry
        naming ``job_id`` (set up by the caller). Re-validated after every rebase.

        Raises: BatchAlreadyCommittedError, LockTimeoutError, ConcurrentAppendError,
        CommitStateUnknownError."""
        payload = requested_payload(operation, key.plan(job_id))
        coordinator.before_requested(table_id, actor)
        with coordinator.lock(table_id) as lease:

            def draft(state: TimelineState) -> EntryDraft:
                if lease.lost:
                    raise LeaseLostError(
                        f"the lease on table {table_id} was lost before opening micro-batch "
                        f"{key.batch_id}; nothing was appended. Help: retry.",
                        table=table_id,
                    )
                return EntryDraft(
                    instant=str(Instant.next_after(state.last_requested())),
                    action=action,
                    transition=Transition.REQUESTED,
                    actor=actor,
                    lock_token=lease.token,
                    wall_time_ms=time.time_ns() // 1_000_000,
                    payload=payload,
                )

            def validate(state: TimelineState, entry: EntryDraft) -> None:
                _refuse_committed(state, key, entry.instant)
                found = pending_batch(state, key)
                if found is not None:
                    raise _Found(*found)

            try:
                entry, _ = timeline.append(draft, validate=validate)
            except _Found as found:
                return found.instant, found.job_id
        coordinator.announce(table_id, entry)
        return entry.instant, job_id


def pending_of_checkpoint(
    state: TimelineState, checkpoint: str, batch_id: int
) -> list[tuple[str, str]]:
    """(instant, job id) of every pending instant opened for ``batch_id`` by a query with this
    checkpoint location, whatever its run (what an abort without messages must roll back)."""
    found = []
    for inst in state.pending():
        plan = inst.job_plan
        batch = plan.batch if plan is not None else None
        if (
            plan is not None
            and plan.job_id is not None
            and batch is not None
            and batch.checkpoint == checkpoint
            and batch.batch_id == batch_id
        ):
            found.append((inst.instant, plan.job_id))
    return found


def _refuse_committed(state: TimelineState, key: BatchKey, instant: str) -> None:
    done = completed_batch(state, key)
    if done is not None and done.instant != instant:
        raise BatchAlreadyCommittedError(
            f"micro-batch {key.batch_id} of streaming query {key.query_id} was committed by "
            f"instant {done.instant}; instant {instant} must not commit it again.",
            instant=instant,
            committed_by=done.instant,
        )
