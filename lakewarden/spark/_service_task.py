"""What one Spark task of a table-service plan does (on an executor): rewrite one unit.

A plan run on Spark (``lakewarden.spark._service``) is one manifest-committer job, named
``<instant>-svc-<executor attempt>`` like the in-process executor's, and one Spark task per
``RewriteUnit`` of the plan (a file group of output). Each task attempt:

1. loads the timeline; when the plan's cancellation was requested meanwhile it writes nothing
   and returns None (RFC-79's short circuit, per task: a retried or late task attempt does no
   work the driver will throw away; the cancel request is irrevocable, so the driver's
   pre-commit aborts the plan);
2. sets up its task attempt of the job (``attempt_<jobId>_<task>_<attemptNumber>``) and runs
   the strategy's ``rewrite_unit`` against the plan's snapshot (as of its ``requested``
   entry), writing the new base file into the attempt's private directory (rename) or
   pending multipart upload (S3) through ``TaskOutput``;
3. commits the task (its manifest) and returns a ``TaskCommitMessage`` naming the attempt and
   its statistics, as a write's task does (``lakewarden.spark._task``), with the records the
   rewrite set aside for the error table (the driver spools those of accepted attempts).

A failed, retried or speculative attempt's files stay private: the driver commits exactly the
attempts whose messages Spark returned, and the job's cleanup deletes the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from lakewarden.commit import ManifestCommitter, TaskAttempt
from lakewarden.spark._messages import TaskCommitMessage
from lakewarden.spark._options import load_settings
from lakewarden.spark._task import TaskIdentity, base_snapshot, current_task
from lakewarden.storage import open_storage
from lakewarden.table.config import TableConfig, load_config
from lakewarden.table.files import WriteToken
from lakewarden.table.instant import Transition
from lakewarden.table.plans import ServicePlan
from lakewarden.table.stats import FileGroupId, WriteStat
from lakewarden.table.timeline import Timeline
from lakewarden.tableservice.errors import UnknownStrategyError
from lakewarden.tableservice.output import base_file
from lakewarden.tableservice.strategy import (
    FileGroupStrategy,
    RewriteJob,
    RewriteUnit,
    TableServiceStrategy,
    strategy_for,
)

__all__ = ["ServiceTaskSpec", "TaskOutput", "file_group_strategy", "rewrite_partition"]


@dataclass(frozen=True)
class ServiceTaskSpec:
    """What every task of one executor attempt needs (pickled into the Spark job; no
    credentials: the settings are encoded without them, as for writes)."""

    uri: str
    settings_json: str | None
    instant: str
    attempt: int  # the executor attempt: the stage id of every file name it writes
    job_id: str
    plan: ServicePlan


class TaskOutput:
    """The ``OutputSink`` of one Spark task attempt: files go into its task attempt."""

    def __init__(
        self, spec: ServiceTaskSpec, config: TableConfig, target: TaskAttempt, spark_attempt: int
    ) -> None:
        self.spec = spec
        self.config = config
        self.target = target
        self.spark_attempt = spark_attempt

    def write(self, file_group: FileGroupId, data: pa.Table, *, task: int) -> WriteStat:
        # Speculative and retried attempts of a task get distinct names (the token's attempt).
        token = WriteToken(task, self.spec.attempt, self.spark_attempt)
        out = base_file(self.config, self.spec.instant, file_group, data, token)
        self.target.write_file(out.key, out.body)
        return out.stat


def file_group_strategy(
    strategy: TableServiceStrategy, plan: ServicePlan, *, table: str, instant: str
) -> FileGroupStrategy:
    """``strategy``, which must split into units to run as Spark tasks.

    Raises: UnknownStrategyError (a strategy without ``rewrite_unit``)."""
    if not isinstance(strategy, FileGroupStrategy):
        raise UnknownStrategyError(
            f"plan {instant} of table {table} names strategy {plan.strategy!r}, which has no "
            "per-file-group entry point and cannot run as Spark tasks. Help: run it in-process "
            "(Table.run_table_service), or make the strategy a FileGroupStrategy.",
            table=table,
            instant=instant,
        )
    return strategy


def rewrite_partition(
    spec: ServiceTaskSpec, units: Iterable[tuple[int, RewriteUnit]]
) -> Iterator[TaskCommitMessage | None]:
    """The Spark partition function: one message (or None, short-circuited) per unit."""
    identity = current_task()
    for task, unit in units:
        yield rewrite_unit_task(spec, identity, task, unit)


def rewrite_unit_task(
    spec: ServiceTaskSpec, identity: TaskIdentity, task: int, unit: RewriteUnit
) -> TaskCommitMessage | None:
    """Steps 1-3 of the module docstring.

    Raises: what the strategy raises, StageFailedError (the committer; JobNotActiveError for
    a zombie attempt of a finished job), InstantNotOnTimelineError, UnknownStrategyError."""
    storage = open_storage(spec.uri, load_settings(spec.settings_json))
    config = load_config(storage)
    state = Timeline(storage, table=config.name).load()
    current = state.get(spec.instant)
    if current is not None and current.state is Transition.CANCEL_REQUESTED:  # 1.
        return None
    table, instant = config.table_id, spec.instant
    found = strategy_for(spec.plan, table=table, instant=instant)
    strategy = file_group_strategy(found, spec.plan, table=table, instant=instant)
    base = base_snapshot(storage, config, spec.instant, state)
    attempt = ManifestCommitter(storage, spec.job_id).task_attempt(task, identity.committer_attempt)
    attempt.setup()  # 2.
    output = TaskOutput(spec, config, attempt, identity.attempt)
    job = RewriteJob(storage, config, spec.instant, spec.plan, base, output, attempt=spec.attempt)
    try:
        result = strategy.rewrite_unit(job, unit, task=task)
    except BaseException:
        try:
            attempt.abort()
        except Exception:  # noqa: BLE001 - the rewrite's own error is what the task reports
            pass
        raise
    done = attempt.commit(  # 3.
        extra_data={"instant": spec.instant, "operation": strategy.operation}
    )
    return TaskCommitMessage(
        instant=spec.instant,
        job_id=spec.job_id,
        attempt_id=str(attempt.attempt_id),
        manifest_key=done.manifest_key,
        write_stats=(result.write_stat,) if result.write_stat is not None else (),
        replaced_file_groups=result.replaced,
        num_failed_records=len(result.failed),
        failed_rows=result.failed,
    )
