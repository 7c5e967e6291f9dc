"""Table services with RFC-79 semantics: cancellable plans, at most one executor per plan.

    instant = table.schedule_clustering(cancellable=True, cancellation_policy={"max_age_s": 7200})
    run = table.run_table_service(instant)         # ServiceRun(outcome=completed | aborted)
    table.request_cancel(instant, requested_by="ops", reason="reindex")   # irrevocable
    table.execute_cancel(instant)                  # delete its files, then aborted

One module per concern: ``strategy`` (the interface a table service implements; clustering
is ``clustering``, compaction plugs in beside it), ``schedule`` (the ``requested`` entry),
``claim`` (the heartbeat under the lock), ``rollback`` (earlier attempts' files), ``output``
(an attempt's files), ``precommit`` (complete, or cancel and abort), ``cancel``
(``request_cancel``, ``execute_cancel``, ``finish_abort``) and ``executor``
(``run_table_service``). ``ServicePlan.input_paths()`` lists the files a plan reads.
"""

from lakewarden.table.cancel import CancelRequestOutcome, request_cancel
from lakewarden.tableservice.cancel import ExecuteCancelOutcome, execute_cancel, finish_abort
from lakewarden.tableservice.clustering import CLUSTERING_STRATEGY, ClusteringStrategy
from lakewarden.tableservice.compaction import COMPACTION_STRATEGY, CompactionStrategy
from lakewarden.tableservice.context import ServiceContext
from lakewarden.tableservice.errors import (
    AttemptFencedError,
    CancelNotRequestedError,
    ExecutorOutputLostError,
    InstantAlreadyCompletedError,
    InvalidPlanOptionsError,
    NotATableServicePlanError,
    PlanAlreadyExecutingError,
    PlanNotCancellableError,
    PlanStillExecutingError,
    RollbackNotFencedError,
    UnknownPlanError,
    UnknownStrategyError,
)
from lakewarden.tableservice.executor import (
    Execution,
    ExecutionFactory,
    InProcessExecution,
    ServiceOutcome,
    ServiceRun,
    run_table_service,
)
from lakewarden.tableservice.output import AttemptOutput
from lakewarden.tableservice.rollback import roll_back_attempts
from lakewarden.tableservice.schedule import schedule
from lakewarden.tableservice.strategy import (
    FileGroupStrategy,
    OutputSink,
    PlanningInput,
    RewriteJob,
    RewriteUnit,
    TableServiceStrategy,
    UnitResult,
    register_strategy,
    strategy_for,
)

__all__ = [
    "CLUSTERING_STRATEGY",
    "COMPACTION_STRATEGY",
    "AttemptFencedError",
    "AttemptOutput",
    "CancelNotRequestedError",
    "CancelRequestOutcome",
    "ClusteringStrategy",
    "CompactionStrategy",
    "ExecuteCancelOutcome",
    "Execution",
    "ExecutionFactory",
    "ExecutorOutputLostError",
    "FileGroupStrategy",
    "InProcessExecution",
    "InstantAlreadyCompletedError",
    "InvalidPlanOptionsError",
    "NotATableServicePlanError",
    "OutputSink",
    "PlanAlreadyExecutingError",
    "PlanNotCancellableError",
    "PlanStillExecutingError",
    "PlanningInput",
    "RollbackNotFencedError",
    "RewriteJob",
    "RewriteUnit",
    "ServiceContext",
    "ServiceOutcome",
    "ServiceRun",
    "TableServiceStrategy",
    "UnitResult",
    "UnknownPlanError",
    "UnknownStrategyError",
    "execute_cancel",
    "finish_abort",
    "register_strategy",
    "request_cancel",
    "roll_back_attempts",
    "run_table_service",
    "schedule",
    "strategy_for",
]
