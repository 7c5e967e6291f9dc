"""RFC-79's scenarios: ingestion precedence, request_cancel / execute_cancel with their named
errors, the short circuit, crash recovery, and at most one executor per plan."""

from __future__ import annotations

import threading

import pytest
from conftest import MakeTable
from service_tables import HookedClustering, append, as_executor, as_sorted, fragmented, hook, rows

from lakewarden.api.table import Table
from lakewarden.commit import StageFailedError
from lakewarden.table import job_commit
from lakewarden.table.cancel import CancelRequestOutcome
from lakewarden.table.conflicts import OverlappingCommitConflict
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.instant import Transition
from lakewarden.table.plans import ServicePlan
from lakewarden.table.stats import WorkloadProfile
from lakewarden.table.timeline import InstantState
from lakewarden.table.transaction import WriteTransaction
from lakewarden.tableservice import (
    AttemptFencedError,
    CancelNotRequestedError,
    ExecuteCancelOutcome,
    ExecutorOutputLostError,
    InstantAlreadyCompletedError,
    PlanAlreadyExecutingError,
    PlanNotCancellableError,
    PlanStillExecutingError,
    RewriteJob,
    ServiceOutcome,
    UnknownPlanError,
    roll_back_attempts,
    schedule,
)
from lakewarden.tableservice import executor as executor_module
from lakewarden.testing import SimulatedCrash


def _state(table: Table, instant: str) -> Transition:
    mine = table.state().get(str(instant))
    assert mine is not None
    return mine.state


def _plan_files(table: Table, instant: str) -> list[str]:
    """Data files of the plan's attempts still in storage (staged ones included)."""
    return [
        o.key
        for o in table.storage.list("")
        if o.key.endswith(f"_{instant}.parquet") or f"manifest_{instant}-svc-" in o.key
    ]


def _hooked_plan(table: Table, *, cancellable: bool) -> str:
    instant = schedule(table.service_context(), HookedClustering(), cancellable=cancellable)
    assert instant is not None
    return str(instant)


class _PausedPastItsTolerance(EmbeddedCoordinator):
    """An executor whose claim mark has expired the moment it is written."""

    def heartbeat_tolerance_s(self, table_id: str) -> float:
        return 0.0


# -- ingestion precedence (goal A, invariant 5) ---------------------------------------------


def test_ingestion_beats_a_pending_cancellable_plan(make_table: MakeTable) -> None:
    table = make_table()
    fragmented(table)
    instant = str(table.schedule_clustering(cancellable=True))
    table.write(rows((1, "eu", 50, "upserted"), (2, "us", 50, "upserted")))
    # The ingestion ignored the plan when it committed, then requested its cancellation.
    assert _state(table, instant) is Transition.CANCEL_REQUESTED
    expected = as_sorted(table.read())
    run = table.run_table_service(instant)
    assert run.outcome is ServiceOutcome.ABORTED and run.short_circuited
    assert _state(table, instant) is Transition.ABORTED
    assert as_sorted(table.read()) == expected  # the table equals the ingestion applied
    assert _plan_files(table, instant) == []


def test_an_ingestion_completing_mid_execution_makes_a_cancellable_plan_abort(
    make_any_table: MakeTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = make_any_table()
    fragmented(table)
    instant = _hooked_plan(table, cancellable=True)
    # An upsert completes while the plan rewrites, and its process dies before it requests
    # the plan's cancellation: the executor finds the conflict itself at pre-commit.
    monkeypatch.setattr(job_commit, "cancel_overtaken_plans", lambda *a, **k: [])
    late = rows(*[(i, "eu", 70, "late") for i in range(1, 9, 2)])
    hook(instant, lambda job: table.write(late))
    run = table.run_table_service(instant)
    assert run.outcome is ServiceOutcome.ABORTED and not run.short_circuited
    assert "OverlappingCommitConflict" in (run.reason or "")
    mine = table.state().get(instant)
    assert mine is not None and mine.state is Transition.ABORTED
    assert _plan_files(table, instant) == []
    assert sum(r["v"] == "late" for r in table.read().to_pylist()) == 4


def test_a_spark_append_mid_execution_does_not_conflict(make_table: MakeTable) -> None:
    """Appends go to new append groups: the plan's groups are untouched, both complete."""
    table = make_table()
    appended = fragmented(table)
    instant = _hooked_plan(table, cancellable=True)
    late = rows(*[(1000 + i, "eu", 7, "late") for i in range(4)])
    hook(instant, lambda job: append(table, late))
    assert table.run_table_service(instant).outcome is ServiceOutcome.COMPLETED
    assert len(table.read()) == len(appended) + 4


def test_a_plan_completed_before_the_ingestion_beats_it(make_table: MakeTable) -> None:
    table = make_table()
    fragmented(table)
    instant = str(table.schedule_clustering(cancellable=True))
    # The ingestion started (requested) before the plan completed ...
    txn = WriteTransaction.begin(
        table.timeline_log, table.coordinator, table.table_id, operation="upsert", actor="w"
    )
    assert table.run_table_service(instant).outcome is ServiceOutcome.COMPLETED
    groups = table.snapshot().slices
    # ... but went inflight (RFC-79 step 2) after it: the plan wins, found at step 2.
    with pytest.raises(OverlappingCommitConflict, match=instant):
        txn.inflight(WorkloadProfile(operation="upsert", file_groups=tuple(groups)))
    assert _state(table, instant) is Transition.COMPLETED


# -- request_cancel ---------------------------------------------------------------------------


def test_request_cancel_of_completed_aborted_and_non_cancellable_instants(
    make_table: MakeTable,
) -> None:
    table = make_table()
    fragmented(table)
    done = str(table.schedule_clustering(cancellable=True, max_file_groups=3))
    table.run_table_service(done)
    with pytest.raises(InstantAlreadyCompletedError, match="cannot cancel a committed instant"):
        table.request_cancel(done, reason="too late")
    fixed = str(table.schedule_clustering(cancellable=False))
    with pytest.raises(PlanNotCancellableError, match="cancellable=true"):
        table.request_cancel(fixed, reason="no")
    pending_write = append(table, rows((9, "eu", 1, "x")), complete=False)
    with pytest.raises(PlanNotCancellableError, match="not a table-service plan"):
        table.request_cancel(pending_write.instant, reason="an ingestion")
    with pytest.raises(UnknownPlanError):
        table.request_cancel("20990101000000000", reason="nothing")
    assert _state(table, fixed) is Transition.REQUESTED  # nothing changed


def test_cancel_request_then_execute_is_irrevocable_and_idempotent(make_table: MakeTable) -> None:
    table = make_table()
    fragmented(table)
    instant = str(table.schedule_clustering(cancellable=True))
    with pytest.raises(CancelNotRequestedError):
        table.execute_cancel(instant)
    outcome = table.request_cancel(instant, requested_by="ops", reason="reindex")
    assert outcome is CancelRequestOutcome.REQUESTED
    again = table.request_cancel(instant, requested_by="ops", reason="again")
    assert again is CancelRequestOutcome.ALREADY_REQUESTED
    mine = table.state().get(instant)
    assert mine is not None and mine.reason == "cancel requested by ops: reindex"
    assert table.execute_cancel(instant) is ExecuteCancelOutcome.ABORTED
    assert table.execute_cancel(instant) is ExecuteCancelOutcome.ALREADY_ABORTED
    assert table.request_cancel(instant, reason="late") is CancelRequestOutcome.ALREADY_ABORTED
    assert table.run_table_service(instant).outcome is ServiceOutcome.ALREADY_ABORTED


# -- execute_cancel and heartbeats ------------------------------------------------------------


def test_execute_cancel_is_refused_while_the_executor_beats(make_table: MakeTable) -> None:
    table = make_table()
    fragmented(table)
    instant = _hooked_plan(table, cancellable=True)
    in_rewrite, finish = threading.Event(), threading.Event()

    def pause(job: RewriteJob) -> None:
        in_rewrite.set()
        finish.wait(10)

    hook(instant, pause)
    executor = as_executor(table, "executor-7")
    runs = []
    worker = threading.Thread(target=lambda: runs.append(executor.run_table_service(instant)))
    worker.start()
    assert in_rewrite.wait(10)
    table.request_cancel(instant, reason="stop it")
    with pytest.raises(PlanStillExecutingError, match="executor-7") as refused:
        table.execute_cancel(instant)
    assert refused.value.owner == "executor-7"
    finish.set()
    worker.join(10)
    # The executor found the request at its pre-commit and aborted itself.
    assert runs[0].outcome is ServiceOutcome.ABORTED
    assert _state(table, instant) is Transition.ABORTED
    assert _plan_files(table, instant) == []


def test_execute_cancel_after_the_executor_died_removes_its_files(make_table: MakeTable) -> None:
    table = make_table()
    fragmented(table)
    expected = as_sorted(table.read())
    instant = _hooked_plan(table, cancellable=True)
    hook(instant, lambda job: (_ for _ in ()).throw(SimulatedCrash()))
    with pytest.raises(SimulatedCrash):
        table.run_table_service(instant)
    assert _plan_files(table, instant)  # the dead attempt left its files
    table.request_cancel(instant, reason="executor died")
    assert table.execute_cancel(instant) is ExecuteCancelOutcome.ABORTED
    assert _plan_files(table, instant) == []
    assert as_sorted(table.read()) == expected


def test_execute_cancel_rerun_after_a_crash_between_rollback_and_aborted(
    make_table: MakeTable,
) -> None:
    table = make_table()
    fragmented(table)
    instant = _hooked_plan(table, cancellable=True)
    hook(instant, lambda job: (_ for _ in ()).throw(SimulatedCrash()))
    with pytest.raises(SimulatedCrash):
        table.run_table_service(instant)
    table.request_cancel(instant, reason="crash test")
    roll_back_attempts(table.service_context(), instant)  # step 6 ran; then the process died
    assert _state(table, instant) is Transition.CANCEL_REQUESTED
    assert table.execute_cancel(instant) is ExecuteCancelOutcome.ABORTED


# -- the executor: short circuit, resume, at most one --------------------------------------


def test_a_retried_executor_short_circuits_without_rewriting(make_table: MakeTable) -> None:
    table = make_table()
    fragmented(table)
    instant = _hooked_plan(table, cancellable=True)
    hook(instant, lambda job: (_ for _ in ()).throw(SimulatedCrash()))
    with pytest.raises(SimulatedCrash):
        table.run_table_service(instant)
    assert _state(table, instant) is Transition.INFLIGHT
    table.request_cancel(instant, reason="give up")
    rewrites: list[str] = []
    hook(instant, lambda job: rewrites.append(job.instant))
    run = table.run_table_service(instant)
    assert run.outcome is ServiceOutcome.ABORTED and run.short_circuited
    assert rewrites == []
    assert _plan_files(table, instant) == []


def test_a_cancel_landing_between_the_claim_and_inflight_short_circuits(
    make_table: MakeTable, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The campaign saw an executor's ``inflight`` refused (IllegalTransitionError) by a cancel
    request that landed after its claim: it now ends the plan aborted, rewriting nothing."""
    table = make_table()
    fragmented(table)
    instant = _hooked_plan(table, cancellable=True)
    rewrites: list[str] = []
    hook(instant, lambda job: rewrites.append(job.instant))

    plan_of = executor_module.service_plan

    def then_a_cancel(current: InstantState) -> ServicePlan:
        table.request_cancel(instant, reason="cancelled meanwhile")  # after the claim
        return plan_of(current)

    monkeypatch.setattr(executor_module, "service_plan", then_a_cancel)
    run = table.run_table_service(instant)
    assert run.outcome is ServiceOutcome.ABORTED and run.short_circuited
    assert run.reason is not None and run.reason.endswith("cancelled meanwhile")
    assert rewrites == []
    assert _state(table, instant) is Transition.ABORTED
    assert _plan_files(table, instant) == []


def test_a_non_cancellable_plan_whose_executor_died_is_resumed_and_completes(
    make_any_table: MakeTable,
) -> None:
    table = make_any_table()
    fragmented(table)
    expected = as_sorted(table.read())
    instant = _hooked_plan(table, cancellable=False)
    hook(instant, lambda job: (_ for _ in ()).throw(SimulatedCrash()))
    with pytest.raises(SimulatedCrash):
        table.run_table_service(instant)
    dead_files = set(_plan_files(table, instant))
    assert dead_files
    hook(instant, lambda job: None)
    run = as_executor(table, "executor-b").run_table_service(instant)
    assert run.outcome is ServiceOutcome.COMPLETED
    assert _state(table, instant) is Transition.COMPLETED
    assert dead_files.isdisjoint(_plan_files(table, instant))  # the dead attempt's are gone
    assert as_sorted(table.read()) == expected


def test_a_second_executor_is_refused_while_the_first_beats(make_table: MakeTable) -> None:
    table = make_table()
    fragmented(table)
    instant = _hooked_plan(table, cancellable=False)
    in_rewrite, finish = threading.Event(), threading.Event()

    def pause(job: RewriteJob) -> None:
        in_rewrite.set()
        finish.wait(10)

    hook(instant, pause)
    first = as_executor(table, "executor-a")
    runs = []
    worker = threading.Thread(target=lambda: runs.append(first.run_table_service(instant)))
    worker.start()
    assert in_rewrite.wait(10)
    with pytest.raises(PlanAlreadyExecutingError, match="executor-a") as refused:
        as_executor(table, "executor-b").run_table_service(instant)
    assert refused.value.owner == "executor-a"
    finish.set()
    worker.join(10)
    assert runs[0].outcome is ServiceOutcome.COMPLETED


def test_two_processes_on_one_plan_commit_exactly_once(make_table: MakeTable) -> None:
    """Two executors that cannot see each other's heartbeat (separate coordinators, as two
    processes without Kafka) and whose claim mark no longer counts (a zombie paused past its
    heartbeat tolerance, here none at all): the newer rolls the older's files back; the older
    can then never complete, and the table has exactly the newer's output."""
    table = make_table()
    fragmented(table)
    expected = as_sorted(table.read())
    instant = _hooked_plan(table, cancellable=False)
    zombie = as_executor(table, "zombie", _PausedPastItsTolerance())
    newer = as_executor(table, "newer", EmbeddedCoordinator())
    results: dict[str, object] = {}

    def newer_runs_meanwhile(job: RewriteJob) -> None:
        hook(instant, lambda _: None)  # the newer executor's own rewrite is plain
        results["newer"] = newer.run_table_service(instant)

    hook(instant, newer_runs_meanwhile)
    # The zombie cannot commit: the newer attempt's inflight fenced it before deleting its
    # files (AttemptFencedError at its pre-commit), or its job was aborted under it (staging
    # stores), whichever it reaches first.
    with pytest.raises((AttemptFencedError, StageFailedError, ExecutorOutputLostError)):
        zombie.run_table_service(instant)
    assert results["newer"].outcome is ServiceOutcome.COMPLETED
    mine = table.state().get(instant)
    assert mine is not None and mine.state is Transition.COMPLETED and mine.commit is not None
    assert all(table.storage.exists(s.path) for s in mine.commit.write_stats)
    assert as_sorted(table.read()) == expected
