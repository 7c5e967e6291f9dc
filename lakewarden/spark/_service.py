"""Table services on Spark: ``run_table_service(spark, uri, instant)``.

    import lakewarden.spark
    instant = table.schedule_clustering(cancellable=True)       # or schedule_compaction()
    run = lakewarden.spark.run_table_service(spark, uri, str(instant))
    run.outcome                                                 # completed | aborted

The RFC-79 protocol is the in-process executor's (``lakewarden.tableservice.executor``), run
by the driver: the claim under the table lock (``PlanAlreadyExecutingError`` naming a live
owner), the short circuit of a plan whose cancellation was requested, the rollback of earlier
attempts' files, ``inflight``, and the pre-commit decision (cancel requested, or a
cancellable plan that lost to an ingestion: delete the files and ``aborted``; else
``completed``, a replace). The driver heartbeats for the plan the whole time, while the Spark
job runs.

Only the rewrite differs (``SparkExecution``, the executor's step 5): one manifest-committer
job for the attempt (the same job id as in-process, so a later attempt's rollback finds it),
one Spark task per ``RewriteUnit`` of the plan (``lakewarden.spark._service_task``), each
task attempt writing its file into its own task attempt; the driver commits the job with
exactly the attempts whose messages Spark returned (a retried or speculative attempt's files
are never placed) and checks the statistics against the placed files. The records the accepted
attempts set aside for the error table (a compaction with ``bad_records="error-table"``) come
back in their messages; the driver spools them for its executor attempt before the
pre-commit and commits them into the error table once the plan completed, as the in-process
executor does.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from lakewarden.api.table import Table
from lakewarden.commit import ManifestCommitter
from lakewarden.settings import Settings
from lakewarden.spark._messages import TaskCommitMessage, accepted_messages
from lakewarden.spark._options import encode_settings
from lakewarden.spark._python import check_worker_python
from lakewarden.spark._service_task import (
    ServiceTaskSpec,
    file_group_strategy,
    rewrite_partition,
)
from lakewarden.table.job_commit import check_statistics
from lakewarden.table.plans import ServicePlan
from lakewarden.table.snapshot import Snapshot
from lakewarden.table.stats import CommitStats
from lakewarden.tableservice import ServiceContext, ServiceRun, TableServiceStrategy, UnitResult
from lakewarden.tableservice import run_table_service as run_in_executor
from lakewarden.tableservice.output import service_job_id
from lakewarden.tableservice.unfit import spool_failed

__all__ = ["SparkExecution", "run_table_service"]


def run_table_service(
    spark: Any, uri: str, instant: str, *, settings: Settings | None = None
) -> ServiceRun:
    """Execute the table-service plan ``instant`` of the table at ``uri`` as a Spark job
    (module docstring). ``settings`` default to the environment's (``LAKEWARDEN_*``).

    Raises: WorkerPythonError, PlanAlreadyExecutingError (naming the owner),
    InstantAlreadyCompletedError, UnknownPlanError, NotATableServicePlanError,
    UnknownStrategyError (also: a strategy without a per-file-group entry point),
    WriteConflictError subclasses (a non-cancellable plan that lost), ExecutorOutputLostError,
    HeartbeatLostError, LockTimeoutError, StageFailedError, StatisticsMismatchError,
    Py4JJavaError (a task failed all its attempts: also UnwritableRecordsError and
    UndivertibleRecordsError of a compaction), CommitStateUnknownError; after a completion
    that set records aside, what committing them raises (``Table.settle_errors`` retries)."""
    check_worker_python(spark)
    settings = settings or Settings()
    table = Table.open(uri, settings=settings)
    encoded = encode_settings(settings)

    def execution(ctx: ServiceContext, plan_instant: str, attempt: int) -> SparkExecution:
        return SparkExecution(spark, ctx, plan_instant, attempt, settings_json=encoded)

    table.settle_errors()
    run = run_in_executor(table.service_context(), str(instant), execution=execution)
    if run.stats is not None and run.stats.failed_records:
        table.settle_errors()
    return run


class SparkExecution:
    """The rewrite of one executor attempt as a Spark job (an ``Execution``)."""

    def __init__(
        self,
        spark: Any,
        ctx: ServiceContext,
        instant: str,
        attempt: int,
        *,
        settings_json: str | None,
    ) -> None:
        self.spark = spark
        self.ctx = ctx
        self.instant = instant
        self.attempt = attempt
        self.settings_json = settings_json
        self.committer = ManifestCommitter(ctx.storage, service_job_id(instant, attempt))
        self._set_up = False

    def rewrite(
        self, strategy: TableServiceStrategy, plan: ServicePlan, base: Snapshot
    ) -> CommitStats:
        """Run the tasks, commit the accepted attempts, return the statistics.

        Raises: UnknownStrategyError, StageFailedError, StatisticsMismatchError,
        ForeignCommitMessageError, Py4JJavaError (a task failed all its attempts)."""
        # The tasks rebuild the strategy and ``base`` from the plan and the timeline.
        units = file_group_strategy(strategy, plan, table=self.ctx.table_id, instant=self.instant)
        work = list(enumerate(units.units(plan)))
        if not work:
            return units.combine([])
        self.committer.setup_job()
        self._set_up = True
        spec = ServiceTaskSpec(
            uri=self.ctx.storage.uri,
            settings_json=self.settings_json,
            instant=self.instant,
            attempt=self.attempt,
            job_id=self.committer.job_id,
            plan=plan,
        )
        context = self.spark.sparkContext
        context.setJobDescription(f"lakewarden {plan.strategy} {self.instant}")
        try:
            results = (
                context.parallelize(work, len(work))
                .mapPartitions(partial(rewrite_partition, spec))
                .collect()
            )
        finally:
            context.setJobDescription(None)
        accepted = accepted_messages(results, instant=self.instant, job_id=spec.job_id)
        if len(accepted) < len(work):
            # A task found the plan's cancellation requested and wrote nothing: the request
            # is irrevocable, so the pre-commit aborts (and rolls this job back). No file of
            # the job is placed: nothing it wrote may ever look like table data.
            return units.combine([])
        committed = self.committer.commit_job(
            [m.attempt_id for m in accepted], description=f"table service {self.instant}"
        )
        stats = units.combine([_unit_result(m) for m in accepted])
        check_statistics(stats, committed.files, instant=self.instant, table=self.ctx.config.name)
        failed = [row for m in accepted for row in m.failed_rows]
        spool_failed(self.ctx.storage, self.instant, self.attempt, failed, stats)
        return stats

    def discard(self) -> None:
        """Abort the job: its staged, uploaded and placed files are deleted."""
        if self._set_up:
            self.committer.abort_job(force=True, reason=f"table service {self.instant} attempt")


def _unit_result(message: TaskCommitMessage) -> UnitResult:
    stat = message.write_stats[0] if message.write_stats else None
    return UnitResult(
        write_stat=stat, replaced=message.replaced_file_groups, failed=message.failed_rows
    )
