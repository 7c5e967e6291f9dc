"""Typed plans and the typed ``rolled_back`` payload: every model round-trips through a
timeline entry, entries written before they were typed (literal old JSON) still load, and the
state machine takes only the plan kind that fits the action."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lakewarden.table.instant import Action, Transition
from lakewarden.table.plans import (
    CancellationPolicy,
    CleanFile,
    CleanPlan,
    JobPlan,
    MicroBatch,
    Plan,
    RollbackPlan,
    ServicePlan,
    UntypedPlan,
)
from lakewarden.table.state_machine import Rejected, Replayer, apply
from lakewarden.table.stats import FileGroupId
from lakewarden.table.timeline_state import (
    InstantState,
    ReasonPayload,
    RequestedPayload,
    TimelineEntry,
    TimelineState,
)
from lakewarden.table.transaction import requested_payload

T0, T1 = "20240101000000000", "20240101000000001"
FG = FileGroupId(partition_path="p=1", file_id="fg-x")
PLANS: list[tuple[Action, Plan]] = [
    (Action.COMMIT, JobPlan(job_id="job-1")),
    (
        Action.COMMIT,
        JobPlan(job_id="job-2", batch=MicroBatch(query_id="q", run_id="r", batch_id=7)),
    ),
    (Action.COMMIT, JobPlan(job_id="job-3", sources=("t@20240101000000000",))),
    (
        Action.CLUSTERING,
        ServicePlan(
            file_groups=(FG,),
            strategy="sort",
            cancellation_policy=CancellationPolicy(max_age_s=60, max_completed_instants=3),
            last_completed_instant=T0,
        ),
    ),
    (Action.CLEAN, CleanPlan(files=(CleanFile(path="p=1/a.parquet", reason="retention"),))),
]


def _entry(seq: int, instant: str, action: Action, transition: Transition, payload: Any) -> Any:
    return {
        "seq": seq,
        "instant": instant,
        "action": action.value,
        "transition": transition.value,
        "actor": "old-writer",
        "lock_token": 1,
        "wall_time_ms": 0,
        "payload": payload,
    }


def _load(*raw: dict[str, Any]) -> TimelineState:
    """Replay entries parsed from JSON text, as the timeline reads them from storage."""
    replayer = Replayer(TimelineState())
    for item in raw:
        verdict = replayer.feed(TimelineEntry.model_validate_json(json.dumps(item)))
        assert verdict is None, verdict
    return replayer.state()


@pytest.mark.parametrize(("action", "plan"), PLANS, ids=lambda p: getattr(p, "kind", str(p)))
def test_typed_plans_round_trip_through_an_entry_and_a_checkpoint(
    action: Action, plan: Plan
) -> None:
    payload = requested_payload(action.value, plan)
    assert payload["plan"]["kind"] == plan.kind and payload["plan"]["version"] == 1
    state = _load(_entry(0, T1, action, Transition.REQUESTED, payload))
    mine = state.get(T1)
    assert mine is not None and mine.plan == plan
    reloaded = TimelineState.model_validate_json(state.model_dump_json())  # a checkpoint
    assert reloaded.get(T1) == mine


def test_plans_written_before_they_were_typed_still_load() -> None:
    """Literal entries as the untyped code wrote them (Spark writes, a streaming batch, the
    error sink, a compaction plan with free-form keys, a rollback)."""
    spark = {"spark": {"job_id": "job-a"}}
    stream = {
        "spark": {
            "job_id": "job-b",
            "spark.streaming.query_id": "q1",
            "spark.streaming.run_id": "run-1",
            "spark.streaming.batch_id": "4",
            "spark.streaming.checkpoint": "/ckpt",
        }
    }
    errors = {"errors": {"sources": ["t@20230101000000000"]}}
    service = {"file_groups": [FG.model_dump()], "strategy": "sort", "owner": "ops"}
    times = [f"2024010100000000{i}" for i in range(6)]
    state = _load(
        _entry(0, times[0], Action.COMMIT, Transition.REQUESTED, _req(spark)),
        _entry(1, times[1], Action.COMMIT, Transition.REQUESTED, _req(stream)),
        _entry(2, times[2], Action.COMMIT, Transition.REQUESTED, _req(errors)),
        _entry(3, times[3], Action.COMPACTION, Transition.REQUESTED, _req(service)),
        _entry(
            4,
            times[4],
            Action.ROLLBACK,
            Transition.REQUESTED,
            _req({"target": times[0], "why": "expired"}),
        ),
        _entry(5, times[5], Action.COMMIT, Transition.REQUESTED, _req({"someone": "else"})),
        _entry(6, times[0], Action.COMMIT, Transition.ROLLED_BACK, {"reason": "old: reason"}),
    )

    def plan(i: int) -> Any:
        inst = state.get(times[i])
        assert inst is not None
        return inst.plan

    assert plan(0) == JobPlan(job_id="job-a")
    assert plan(1) == JobPlan(
        job_id="job-b",
        batch=MicroBatch(query_id="q1", run_id="run-1", batch_id=4, checkpoint="/ckpt"),
    )
    assert plan(2) == JobPlan(job_id=None, sources=("t@20230101000000000",))
    assert isinstance(plan(3), ServicePlan) and plan(3).file_groups == (FG,)
    assert plan(3).strategy == "sort" and plan(3).model_extra == {"owner": "ops"}
    assert plan(4) == RollbackPlan(target=times[0])
    assert plan(5) == UntypedPlan(data={"someone": "else"})
    rolled = state.get(times[0])
    assert rolled is not None and rolled.state is Transition.ROLLED_BACK
    assert (rolled.reason, rolled.failed_stage, rolled.failed_job_id) == ("old: reason", None, None)
    assert rolled.job_plan == JobPlan(job_id="job-a") and rolled.rollback_by == times[4]


def test_an_old_checkpoint_with_untyped_plans_loads() -> None:
    old = {
        "instants": {
            T1: {
                "instant": T1,
                "action": "commit",
                "state": "requested",
                "requested_seq": 0,
                "last_seq": 0,
                "plan": {"spark": {"job_id": "job-a"}},
            }
        },
        "tail_seq": 0,
    }
    state = TimelineState.model_validate_json(json.dumps(old))
    mine = state.get(T1)
    assert mine is not None and mine.job_plan is not None and mine.job_plan.job_id == "job-a"


def _req(plan: Any) -> dict[str, Any]:
    return {"operation": "x", "cancellable": False, "plan": plan}


@pytest.mark.parametrize(
    ("action", "plan", "fragment"),
    [
        (Action.COMMIT, RollbackPlan(target=T0), "a commit takes no plan or JobPlan"),
        (Action.CLUSTERING, JobPlan(job_id="j"), "takes ServicePlan, not JobPlan"),
        (Action.ROLLBACK, None, "takes RollbackPlan, not no plan"),
        (Action.CLEAN, ServicePlan(file_groups=(FG,)), "takes no plan or CleanPlan"),
    ],
)
def test_a_plan_of_the_wrong_kind_is_rejected(
    action: Action, plan: Plan | None, fragment: str
) -> None:
    entry = TimelineEntry.model_validate(
        _entry(0, T1, action, Transition.REQUESTED, requested_payload("x", plan))
    )
    verdict = apply(TimelineState(), entry)
    assert isinstance(verdict, Rejected) and fragment in verdict.reason


def test_an_unknown_plan_kind_or_version_is_rejected() -> None:
    for plan in ({"kind": "teleport"}, {"kind": "job", "version": 9, "job_id": "j"}):
        entry = TimelineEntry.model_validate(_entry(0, T1, Action.COMMIT, Transition.REQUESTED,
                                                    _req(plan)))  # fmt: skip
        verdict = apply(TimelineState(), entry)
        assert isinstance(verdict, Rejected) and "RequestedPayload" in verdict.reason


def test_rolled_back_payload_carries_stage_job_and_error_type_as_fields() -> None:
    payload = ReasonPayload(
        version=2,
        reason="OverlappingCommitConflict: ...",
        failed_stage="complete_instant",
        job_id="job-a",
        error_type="OverlappingCommitConflict",
    )
    assert ReasonPayload.model_validate_json(payload.model_dump_json()) == payload
    state = _load(
        _entry(0, T1, Action.COMMIT, Transition.REQUESTED, _req({"kind": "job", "job_id": "a"})),
        _entry(1, T1, Action.COMMIT, Transition.ROLLED_BACK, payload.model_dump(mode="json")),
    )
    mine = state.get(T1)
    assert isinstance(mine, InstantState)
    assert (mine.failed_stage, mine.failed_job_id, mine.error_type) == (
        "complete_instant",
        "job-a",
        "OverlappingCommitConflict",
    )
    old = ReasonPayload.model_validate({"reason": "given up"})
    assert old.version == 1 and old.failed_stage is None and old.job_id is None


def test_requested_payload_forbids_unknown_keys_but_plans_are_typed() -> None:
    parsed = RequestedPayload.model_validate(_req({"spark": {"job_id": "j"}}))
    assert parsed.plan == JobPlan(job_id="j")
