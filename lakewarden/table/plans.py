"""The plan a ``requested`` entry carries: typed, discriminated by ``kind``, versioned.

Every producer of an instant says in its plan what the instant is for, and every reader asks
the typed model (``InstantState.job_plan``, ``plan.job_id``), never a dict:

- ``JobPlan`` (commit, deltacommit): the manifest-committer job whose files the instant
  completes, the streaming micro-batch it writes, if any (delta-rs's ``Txn{app_id, version}``:
  the query id and batch id an exactly-once sink keys on), and, for an error table, the main
  instants whose failed records it holds;
- ``ServicePlan`` (compaction, clustering; Hudi RFC-79): the file groups it rewrites, the
  strategy, its cancellation policy and the last completed instant the planner saw
  (``cancellable`` itself is a field of the requested payload: the state machine checks it);
- ``CleanPlan`` (clean): the files to delete and why;
- ``RollbackPlan`` (rollback): the pending ingestion instant it rolls back.

Each model has ``kind`` (the discriminator) and ``version``; a new field with a default keeps
the version, a changed meaning gets a new one. Entries written before plans were typed carry
plain dicts (``{"spark": {"job_id": ...}}``, ``{"errors": {"sources": [...]}}``,
``{"file_groups": [...]}``, ``{"target": ...}``); ``upgrade_legacy_plan`` reads them as the
models above, so old timelines and checkpoints load unchanged. A legacy dict of no known shape
loads as ``UntypedPlan`` rather than failing: refusing it would drop a completed instant from
every snapshot.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, JsonValue

from lakewarden.table.instant import Action
from lakewarden.table.stats import FileGroupId
from lakewarden.table.stats import MicroBatch as MicroBatch  # defined beside CommitStats

_INSTANT_PATTERN = r"^\d{17}$"
# The keys the Spark writer put into legacy ``{"spark": {...}}`` plans.
_LEGACY_JOB_ID: Final = "job_id"
_LEGACY_QUERY_ID: Final = "spark.streaming.query_id"
_LEGACY_RUN_ID: Final = "spark.streaming.run_id"
_LEGACY_BATCH_ID: Final = "spark.streaming.batch_id"
_LEGACY_CHECKPOINT: Final = "spark.streaming.checkpoint"


class JobPlan(BaseModel):
    """An ingestion instant: the committer job that writes it.

    ``job_id`` is None only for error-table instants written before they had a job."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["job"] = "job"
    version: Literal[1] = 1
    job_id: str | None = Field(default=None, min_length=1)
    batch: MicroBatch | None = None
    # Error table: the main instants (``<table id>@<instant>``) whose failed records it holds.
    sources: tuple[str, ...] = ()


class CancellationPolicy(BaseModel):
    """When the cleaner cancels a cancellable plan that has no live executor (RFC-79)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_age_s: float | None = Field(default=None, gt=0)
    max_completed_instants: int | None = Field(default=None, gt=0)


class PlannedSlice(BaseModel):
    """One input file slice of a table-service plan: what the executor reads, as the snapshot
    of ``last_completed_instant`` had it (the cleaner keeps these files while the plan is
    pending)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    file_group: FileGroupId
    base_instant: str = Field(pattern=_INSTANT_PATTERN)
    paths: tuple[str, ...] = ()


class ServicePlan(BaseModel):
    """A compaction or clustering (RFC-79): the file groups it rewrites.

    ``input_slices`` (planned by ``lakewarden.tableservice``) name the files the executor
    reads; ``input_paths()`` lists them. Unknown keys are kept (legacy plans carried free-form
    keys beside ``file_groups``)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    kind: Literal["service"] = "service"
    version: Literal[1] = 1
    file_groups: tuple[FileGroupId, ...] = Field(min_length=1)
    strategy: str | None = None
    cancellation_policy: CancellationPolicy | None = None
    # The newest completed instant when the plan was made: its input is the snapshot as of it.
    last_completed_instant: str | None = Field(default=None, pattern=_INSTANT_PATTERN)
    input_slices: tuple[PlannedSlice, ...] = ()
    # Clustering: the columns the rewritten files are sorted by (empty: keep the order).
    sort_by: tuple[str, ...] = ()
    # Compaction: a merged record the table's schema cannot hold fails the plan ("fail"), or
    # goes to the error table with the compaction instant ("error-table";
    # ``lakewarden.tableservice.unfit``). Recorded in the plan, so every attempt does the same.
    bad_records: Literal["fail", "error-table"] = "fail"

    def input_paths(self) -> tuple[str, ...]:
        """Every file the plan's executor reads (keys relative to the table root), in plan
        order; a cleaner must keep them while the plan is pending."""
        return tuple(path for s in self.input_slices for path in s.paths)


class CleanFile(BaseModel):
    """One file a clean deletes, and the rule that made it garbage."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    size_bytes: int = Field(default=0, ge=0)
    # A pending multipart upload to ``path`` (of a finished or dead job): aborted, not deleted.
    upload_id: str | None = None


class CleanPlan(BaseModel):
    """A clean: the files it deletes (never one a retained snapshot or pending plan reads)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["clean"] = "clean"
    version: Literal[1] = 1
    files: tuple[CleanFile, ...] = ()
    earliest_retained_instant: str | None = Field(default=None, pattern=_INSTANT_PATTERN)
    # The policy that chose the files (``CleanPolicy.describe()``), for messages.
    policy: str | None = None


class RollbackPlan(BaseModel):
    """A rollback: the pending ingestion instant it rolls back. Appending it is the rollback
    *intent*: from then on the target can only be rolled back."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["rollback"] = "rollback"
    version: Literal[1] = 1
    target: str = Field(pattern=_INSTANT_PATTERN)


class UntypedPlan(BaseModel):
    """A legacy plan of no known shape, kept as it was written (never written any more)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["untyped"] = "untyped"
    version: Literal[1] = 1
    data: dict[str, JsonValue]


def upgrade_legacy_plan(data: Any) -> Any:
    """A plan as the typed models read it: a legacy dict (no ``kind``) in their shape; models
    and typed dicts as they are (validation happens after)."""
    if not isinstance(data, dict) or "kind" in data:
        return data
    spark = data.get("spark")
    if isinstance(spark, dict):
        return _legacy_job(spark)
    errors = data.get("errors")
    if isinstance(errors, dict):
        return {"kind": "job", "sources": errors.get("sources", ())}
    if isinstance(data.get(_LEGACY_JOB_ID), str):
        return {"kind": "job", "job_id": data[_LEGACY_JOB_ID]}
    if "file_groups" in data:
        return {"kind": "service", **data}
    if "target" in data:  # the untyped RollbackPlan kept unknown keys; only the target counts
        return {"kind": "rollback", "target": data["target"]}
    return {"kind": "untyped", "data": data}


def _legacy_job(spark: dict[str, Any]) -> dict[str, Any]:
    plan: dict[str, Any] = {"kind": "job", "job_id": spark.get(_LEGACY_JOB_ID)}
    if spark.get(_LEGACY_QUERY_ID) and spark.get(_LEGACY_BATCH_ID) is not None:
        plan["batch"] = {
            "query_id": spark[_LEGACY_QUERY_ID],
            "run_id": spark.get(_LEGACY_RUN_ID) or "",
            "batch_id": int(spark[_LEGACY_BATCH_ID]),
            "checkpoint": spark.get(_LEGACY_CHECKPOINT) or "",
        }
    return plan


Plan = Annotated[
    JobPlan | ServicePlan | CleanPlan | RollbackPlan | UntypedPlan,
    Field(discriminator="kind"),
]
# What ``requested`` payloads and instant states hold: legacy dicts are upgraded on load.
PlanField = Annotated[Plan | None, BeforeValidator(upgrade_legacy_plan)]

# The plan kinds each action may carry (None: no plan), as the state machine checks them.
# Legacy plans of no known shape (``UntypedPlan``) are accepted where a plan was optional.
PLAN_KINDS: Final[dict[Action, tuple[type[BaseModel] | None, ...]]] = {
    Action.COMMIT: (None, JobPlan, UntypedPlan),
    Action.DELTACOMMIT: (None, JobPlan, UntypedPlan),
    Action.COMPACTION: (ServicePlan,),
    Action.CLUSTERING: (ServicePlan,),
    Action.CLEAN: (None, CleanPlan, UntypedPlan),
    Action.ROLLBACK: (RollbackPlan,),
}
