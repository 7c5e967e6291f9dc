"""The campaign's checkers catch each violation they name (a checker that cannot fail proves
nothing), and pass a history that is consistent with its table."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from _checkers import (
    Op,
    TableObservation,
    check_cleaners,
    check_error_table,
    check_reader,
    check_run,
    ops_from_history,
)
from _event_checkers import COMPARED, check_event_timeline
from _schedule import EMBEDDED_ACTORS, make_embedded_plan, make_plan
from _service_checkers import ServiceOp, check_services, service_ops_from_history
from _writer import History, write_loop


def _op(
    number: int,
    operation: str,
    keys: list[str],
    outcome: str,
    *,
    writer: str = "w0",
    incarnation: int = 1,
    instant: str | None = None,
    raw: bool = False,
) -> Op:
    op_id = f"{writer}.{incarnation}.{number}"
    rows = tuple({"key": k, "part": "p0", "ts": number, "v": op_id} for k in keys)
    return Op(op_id, writer, incarnation, number, operation, rows, outcome, instant, raw=raw)


def _entries(*spec: tuple[int, str, str, str]) -> list[dict[str, Any]]:
    return [
        {"seq": seq, "instant": i, "action": "commit", "transition": t, "actor": a}
        for seq, i, t, a in spec
    ]


ACTOR = "campaign-w0-1"
# One acknowledged insert (instant I1) and one acknowledged upsert of a pool key (I2).
OPS = [
    _op(1, "insert", ["w0.i1.1.0", "w0.i1.1.1"], "ok", instant="I1"),
    _op(2, "upsert", ["w0.p0"], "ok", instant="I2"),
]
ENTRIES = _entries(
    (0, "I1", "requested", ACTOR),
    (1, "I1", "completed", ACTOR),
    (2, "I2", "requested", ACTOR),
    (3, "I2", "completed", ACTOR),
)
ROWS = [
    {"key": "w0.i1.1.0", "v": "w0.1.1", "commit_time": "I1"},
    {"key": "w0.i1.1.1", "v": "w0.1.1", "commit_time": "I1"},
    {"key": "w0.p0", "v": "w0.1.2", "commit_time": "I2"},
]


def _check(
    ops: list[Op] = OPS,
    rows: list[dict[str, Any]] = ROWS,
    entries: list[dict[str, Any]] = ENTRIES,
    **more: Any,
) -> list[str]:
    observation = TableObservation(rows=rows, entries=entries, **more)
    return [v.name for v in check_run({"t": ops}, {"t": observation})]


def test_a_consistent_history_passes() -> None:
    assert _check() == []


@pytest.mark.parametrize(
    ("name", "rows"),
    [
        ("duplicate_key", [*ROWS, ROWS[0]]),
        ("acknowledged_insert_missing", ROWS[1:]),
        ("phantom_row", [*ROWS, {"key": "x", "v": "nobody.1.1", "commit_time": "I9"}]),
        ("pool_key_wrong", ROWS[:2]),  # the acknowledged upsert is not visible
    ],
)
def test_a_wrong_table_is_caught(name: str, rows: list[dict[str, Any]]) -> None:
    assert name in _check(rows=rows)


def test_a_visible_failed_write_is_caught() -> None:
    ops = [*OPS, _op(3, "upsert", ["w0.p1"], "fail")]
    rows = [*ROWS, {"key": "w0.p1", "v": "w0.1.3", "commit_time": "I3"}]
    assert "failed_write_visible" in _check(ops=ops, rows=rows)


def test_an_unknown_write_may_be_visible_entirely_or_not_at_all() -> None:
    unknown = _op(3, "insert", ["a", "b"], "unknown")
    both = [{"key": k, "v": "w0.1.3", "commit_time": "I3"} for k in ("a", "b")]
    entries = [*ENTRIES, *_entries((4, "I3", "requested", ACTOR), (5, "I3", "completed", ACTOR))]
    assert _check(ops=[*OPS, unknown]) == []
    assert _check(ops=[*OPS, unknown], rows=ROWS + both, entries=entries) == []
    assert "unknown_insert_partial" in _check(ops=[*OPS, unknown], rows=ROWS + both[:1])


def test_an_unknown_upsert_allows_either_value_and_a_later_acknowledged_one_decides() -> None:
    unknown = _op(3, "upsert", ["w0.p0"], "unknown")
    new = [*ROWS[:2], {"key": "w0.p0", "v": "w0.1.3", "commit_time": "I3"}]
    entries = [*ENTRIES, *_entries((4, "I3", "requested", ACTOR), (5, "I3", "completed", ACTOR))]
    assert _check(ops=[*OPS, unknown], rows=new, entries=entries) == []
    assert _check(ops=[*OPS, unknown]) == []
    deleted = _op(4, "delete", ["w0.p0"], "ok", instant="I4")
    entries += _entries((6, "I4", "requested", ACTOR), (7, "I4", "completed", ACTOR))
    assert "pool_key_wrong" in _check(ops=[*OPS, unknown, deleted], rows=new, entries=entries)


def test_instant_invariants() -> None:
    undone = [*ENTRIES, *_entries((4, "I2", "rolled_back", "cleaner"))]
    assert "completed_and_undone" in _check(entries=undone)
    assert _check(entries=undone, rejected_seqs={4}) == []  # an ignored entry changes nothing
    assert "acknowledged_instant_not_completed" in _check(entries=ENTRIES[:3])
    stray = [*ENTRIES, *_entries((4, "I5", "requested", ACTOR), (5, "I5", "completed", ACTOR))]
    assert "completed_without_acknowledgement" in _check(entries=stray)


def test_leftovers_and_raw_errors() -> None:
    assert "pending_left_behind" in _check(pending=["I7"])
    entries = [*ENTRIES, *_entries((4, "I7", "requested", ACTOR), (5, "I7", "rolled_back", "c"))]
    keys = ["part=p0/00000000-0000_0-0-0_I7.parquet"]
    assert "rolled_back_files_left" in _check(entries=entries, data_keys=keys)
    assert "raw_error" in _check(ops=[*OPS, _op(3, "upsert", ["w0.p1"], "unknown", raw=True)])


def test_a_write_the_process_was_killed_in_is_unknown() -> None:
    lines = [
        {"phase": "start"},
        {"phase": "invoke", "op": "w0.1.1", "operation": "insert", "rows": []},
        {"phase": "ok", "op": "w0.1.1", "instant": "I1"},
        {"phase": "invoke", "op": "w0.1.2", "operation": "upsert", "rows": []},
    ]
    ops = ops_from_history("w0", 1, lines)
    assert [(op.op_id, op.outcome, op.instant) for op in ops] == [
        ("w0.1.1", "ok", "I1"),
        ("w0.1.2", "unknown", None),
    ]


def test_reads_during_the_run_show_committed_writes_only() -> None:
    ops = [*OPS, _op(3, "upsert", ["w0.p1"], "fail")]

    def check(*reads: list[dict[str, Any]]) -> list[str]:
        observation = TableObservation(rows=ROWS, entries=ENTRIES)
        found = check_run({"t": ops}, {"t": observation}, reads={"t": list(reads)})
        return [v.name for v in found]

    assert check([], ROWS[:1], ROWS) == []
    assert check(ROWS, [*ROWS, ROWS[0]]) == ["read_duplicate_key"]
    assert check([{"key": "w0.p1", "v": "w0.1.3"}]) == ["read_saw_failed_write"]
    assert check([{"key": "x", "v": "nobody.1.1"}]) == ["read_phantom_row"]


def test_pending_instants_are_not_checked_where_nothing_can_roll_them_back() -> None:
    """The embedded mode: a killed writer's instant stays pending (``settled=False``)."""
    observation = TableObservation(rows=ROWS, entries=ENTRIES, pending=["I7"], requested=["I8"])
    assert check_run({"t": OPS}, {"t": observation}, settled=False) == []


# -- readers and cleaners of the embedded mode (_checkers.check_reader, check_cleaners) -------


def _reads(*reads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"phase": "read", "as_of": None, "rows": rows} for rows in reads]


def _read_error(error: str, *, named: bool = True) -> dict[str, Any]:
    return {"phase": "read_error", "as_of": "I1", "error": error, "named": named, "message": "m"}


def test_a_reader_sees_whole_committed_writes_or_a_named_error() -> None:
    ops = [*OPS, _op(3, "upsert", ["w0.p1"], "fail")]

    def check(*lines: dict[str, Any]) -> list[str]:
        return sorted(v.name for v in check_reader(ops, list(lines)))

    cleaned, missing = _read_error("InstantCleanedError"), _read_error("MissingDataFileError")
    assert check(*_reads([], ROWS[2:], ROWS), cleaned, missing) == []
    assert check(*_reads(ROWS[:1])) == ["read_partial_write"]  # one of I1's two rows
    assert check(*_reads([*ROWS, ROWS[2]])) == ["read_duplicate_key"]
    assert check(*_reads([{"key": "w0.p1", "v": "w0.1.3"}])) == ["read_saw_failed_write"]
    assert check(*_reads([{"key": "x", "v": "nobody.1.1"}])) == ["read_phantom_row"]
    assert check(_read_error("SchemaMismatchError")) == ["read_unnamed_error"]
    assert check(_read_error("FileNotFoundError", named=False)) == ["read_raw_error"]


def test_a_cleaner_with_a_raw_error_or_a_lost_race_is_caught() -> None:
    done = {"op": "c0.1.1.0", "step": "clean", "phase": "done", "outcome": "cleaned"}
    lost = {
        "op": "c1.1.1.0",
        "step": "clean",
        "phase": "fail",
        "error": "IllegalTransitionError",
        "message": "completed after completed",
    }
    raw = {"op": "c1.1.2.0", "step": "clean", "phase": "unknown", "raw": True, "message": "x"}
    assert check_cleaners([done]) == []
    assert [v.name for v in check_cleaners([done, lost, raw])] == [
        "clean_lost_race",
        "clean_raw_error",
    ]


def test_an_embedded_plan_races_every_actor_with_stalls_at_destructive_steps() -> None:
    """Two executors, two cleaners, two cancel requesters and a reader on the first table;
    the tables and writers are the Kafka plan's (no S3); every process but the reader may be
    killed or paused, and stalls land before deletes and timeline appends."""
    plans = [make_embedded_plan(seed, duration_s=10) for seed in range(500, 540)]
    for plan in plans:
        kafka = make_plan(plan.seed, duration_s=10, services=("cleaner",), s3_available=False)
        assert plan.tables == kafka.tables and not plan.on_s3
        assert [w for w in plan.writers if w.role == "writer"] == list(kafka.writers)
        actors = [(w.name, w.role) for w in plan.writers if w.role != "writer"]
        assert actors == list(EMBEDDED_ACTORS)
        assert all(w.table == plan.tables[0].name for w in plan.writers if w.role != "writer")
        assert all(e.kind in ("writer_kill", "writer_pause") for e in plan.faults)
        assert "r0" not in {e.target for e in plan.faults}
    stalls = [f for p in plans for w in p.writers if w.role != "writer" for f in w.storage_faults]
    assert {f.op for f in stalls} == {"delete", "write_if_absent", "read"}
    assert all(f.kind == "stall" and f.stall_s > 0 for f in stalls)
    assert any(f.stall_s > 2.0 for f in stalls)  # past the embedded claim tolerance


# -- table services and cancellation (_service_checkers.py) ---------------------------------

P = "P1"  # a clustering plan
EXEC_A, EXEC_B = "executor-e0-1", "executor-e1-1"


def _plan_entries(*spec: tuple[int, str, str]) -> list[dict[str, Any]]:
    return [
        {"seq": seq, "instant": i, "action": "clustering", "transition": t, "actor": a}
        for seq, i, t, a in ((s, P, t, a) for s, t, a in spec)
    ]


def _svc(
    number: int, step: str, phase: str, outcome: str | None, *, process: str = "e0"
) -> ServiceOp:
    return ServiceOp(f"{process}.1.{number}", process, step, P, phase, outcome)


COMPLETED_PLAN = _plan_entries(
    (4, "requested", EXEC_A), (5, "inflight", EXEC_A), (6, "completed", EXEC_A)
)


def _check_svc(
    ops: list[ServiceOp],
    plan_entries: list[dict[str, Any]],
    **more: Any,
) -> list[str]:
    observation = TableObservation(rows=ROWS, entries=ENTRIES + plan_entries, **more)
    return [v.name for v in check_services(ops, observation)]


def test_a_consistent_table_service_history_passes() -> None:
    ran = [_svc(1, "run", "done", "completed"), _svc(2, "run", "fail", None, process="e1")]
    files = ["part=p0/00000000-0000_1-2-0_P1.parquet"]
    assert _check_svc(ran, COMPLETED_PLAN, visible_files=files, data_keys=files) == []


def test_a_plan_completed_by_two_executors_is_caught() -> None:
    both = [_svc(1, "run", "done", "completed"), _svc(1, "run", "done", "completed", process="e1")]
    assert "plan_completed_twice" in _check_svc(both, COMPLETED_PLAN)
    twice = [*COMPLETED_PLAN, *_plan_entries((7, "completed", EXEC_B))]
    assert "plan_completed_twice" in _check_svc([], twice)
    assert _check_svc([], twice, rejected_seqs={7}) == []  # the state machine ignored it


def test_an_executor_told_completed_or_aborted_against_the_timeline_is_caught() -> None:
    pending = COMPLETED_PLAN[:2]
    told = [_svc(1, "run", "done", "completed")]
    assert "plan_completed_not_on_timeline" in _check_svc(told, pending)
    aborted = [_svc(1, "run", "done", "aborted")]
    assert "plan_outcome_contradicted" in _check_svc(aborted, COMPLETED_PLAN)


def test_a_cancel_request_undone_is_caught_whichever_comes_first() -> None:
    requested = _plan_entries((4, "requested", EXEC_A), (5, "cancel_requested", "ops"))
    later = [*requested, *_plan_entries((6, "completed", EXEC_A))]
    assert "cancel_undone" in _check_svc([], later)
    assert _check_svc([], later, rejected_seqs={6}) == []
    earlier = [*COMPLETED_PLAN, *_plan_entries((7, "cancel_requested", "ops"))]
    assert "cancel_undone" in _check_svc([], earlier)
    told = [_svc(1, "run", "done", "completed")]
    assert "cancel_undone" in _check_svc(told, requested)


def test_an_acknowledged_cancel_request_that_is_lost_is_caught() -> None:
    cancel = [_svc(1, "cancel", "done", "accepted")]
    requested = _plan_entries((4, "requested", EXEC_A))
    assert "cancel_request_lost" in _check_svc(cancel, requested)
    cancelled = [*requested, *_plan_entries((5, "cancel_requested", "ops"))]
    assert _check_svc(cancel, cancelled) == []
    refused = [_svc(1, "cancel", "done", "refused_completed")]
    assert _check_svc(refused, COMPLETED_PLAN) == []


def test_files_of_an_aborted_plan_are_caught() -> None:
    aborted = _plan_entries(
        (4, "requested", EXEC_A), (5, "cancel_requested", "ops"), (6, "aborted", "ops")
    )
    file = "part=p0/00000000-0000_1-7-0_P1.parquet"
    assert _check_svc([], aborted) == []
    assert "aborted_plan_visible" in _check_svc([], aborted, visible_files=[file])
    assert "aborted_plan_files_left" in _check_svc([], aborted, data_keys=[file])
    staged = f"_temporary/manifest_P1-svc-1/01/tasks/{file}"
    assert _check_svc([], aborted, data_keys=[staged]) == []


def test_a_step_the_executor_was_killed_in_is_unknown_and_raw_errors_are_caught() -> None:
    lines = [
        {"phase": "invoke", "op": "e0.1.1", "step": "schedule", "plan": None},
        {"phase": "done", "op": "e0.1.1", "step": "schedule", "plan": "P1", "outcome": "x"},
        {"phase": "invoke", "op": "e0.1.2", "step": "run", "plan": "P1"},
    ]
    ops = service_ops_from_history("e0", lines)
    assert [(op.step, op.plan, op.phase) for op in ops] == [
        ("schedule", "P1", "done"),
        ("run", "P1", "unknown"),
    ]
    raw = ServiceOp("e0.1.3", "e0", "run", P, "unknown", raw=True, message="KeyError")
    assert _check_svc([raw], COMPLETED_PLAN) == ["service_raw_error"]


# -- the storage timeline against the timeline topic (_event_checkers.py) -------------------


def _events(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{name: e.get(name) for name in ("seq", *COMPARED)} for e in entries]


def _check_events(events: list[dict[str, Any]]) -> list[str]:
    found, _ = check_event_timeline(ENTRIES, events, strict_actors={ACTOR})
    return [v.name for v in found]


def test_an_event_timeline_equal_to_storage_passes_even_with_redeliveries() -> None:
    assert _check_events(_events(ENTRIES)) == []
    assert _check_events(_events(ENTRIES + ENTRIES[:1])) == []


def test_an_event_timeline_that_disagrees_with_storage_is_caught() -> None:
    events = _events(ENTRIES)
    other = {**events[1], "transition": "rolled_back"}
    assert _check_events([*events[:1], other, *events[2:]]) == ["timeline_event_differs"]
    assert _check_events([*events, other]) == ["timeline_event_conflicting"]
    beyond = {**events[0], "seq": 9}
    assert _check_events([*events, beyond]) == ["timeline_event_without_entry"]


def test_an_unannounced_entry_fails_only_for_an_undisturbed_appender() -> None:
    events = _events(ENTRIES)[1:]
    assert _check_events(events) == ["timeline_event_missing"]
    found, unannounced = check_event_timeline(ENTRIES, events, strict_actors=set())
    assert (found, unannounced) == ([], 1)


# -- the error table (invariant 8) ------------------------------------------------------------


def _with_bad(op: Op) -> Op:
    return replace(op, bad=({"key": None, "part": "p0", "ts": 1, "v": f"{op.op_id}.bad"},))


def test_the_error_table_must_hold_exactly_the_bad_rows_of_committed_writes() -> None:
    acked = _with_bad(_op(3, "insert", ["a"], "ok", instant="I3"))
    failed = _with_bad(_op(4, "insert", ["b"], "fail"))
    unknown = _with_bad(_op(5, "insert", ["c"], "unknown"))
    ops = [acked, failed, unknown]
    good = [{"v": "w0.1.3.bad", "instant": "I3"}]

    def check(rows: list[dict[str, Any]]) -> list[str]:
        return [v.name for v in check_error_table(ops, rows)]

    assert check(good) == []
    assert check([*good, {"v": "w0.1.5.bad", "instant": "I5"}]) == []  # unknown: either way
    assert check([]) == ["error_record_missing"]
    assert check(good * 2) == ["error_record_twice"]
    assert check([{"v": "w0.1.3.bad", "instant": "I9"}]) == ["error_record_wrong_instant"]
    assert check([*good, {"v": "w0.1.4.bad", "instant": "I4"}]) == ["error_record_of_failed_write"]
    assert check([*good, {"v": "nobody.bad", "instant": "I4"}]) == ["error_record_phantom"]


def test_spark_task_faults_are_planned_without_changing_the_other_draws() -> None:
    """A Spark run's writer ``s0`` gets 1-3 task faults among writes 2-6 (write 1 is its
    warm-up); the rest of the seed's plan is the plan without Spark."""
    services = ("timeline-lock", "cleaner")
    with_spark = [
        make_plan(seed, duration_s=20, services=services, s3_available=False, spark_share=1.0)
        for seed in range(7000, 7020)
    ]
    for plan in with_spark:
        without = make_plan(plan.seed, duration_s=20, services=services, s3_available=False)
        assert plan.tables == without.tables
        assert plan.writers[:-1] == without.writers
        assert set(without.faults) <= set(plan.faults)
        spark = plan.writers[-1]
        assert spark.role == "spark" and 1 <= len(spark.task_faults) <= 3
        assert all(2 <= f.op <= 6 for f in spark.task_faults)
    kinds = {f.kind for plan in with_spark for f in plan.writers[-1].task_faults}
    assert kinds == {"fail", "exit", "slow"}


def test_a_warm_up_write_comes_first_then_ready_and_task_faults_are_recorded(
    tmp_path: Path,
) -> None:
    history_path, stop = tmp_path / "s0.1.jsonl", tmp_path / "stop"
    spec = {
        "writer": "s0",
        "incarnation": 1,
        "seed": 7,
        "stop": str(stop),
        "task_faults": [{"op": 2, "kind": "exit"}],
    }
    calls: list[tuple[str, int, str | None]] = []

    def write(operation: str, rows: list[dict[str, Any]], task_fault: str | None) -> str:
        calls.append((operation, len(rows), task_fault))
        if len(calls) == 3:
            stop.touch()
        return f"I{len(calls)}"

    history = History(history_path)
    write_loop(spec, history, write, actor="spark-s0-1", warm_up=True)
    history.close()

    assert calls[0] == ("insert", 1, None)
    assert [c[2] for c in calls] == [None, "exit", None]
    phases = [json.loads(line)["phase"] for line in history_path.read_text().splitlines()]
    assert phases[:4] == ["start", "invoke", "ok", "ready"]
    ops = ops_from_history("s0", 1, [json.loads(x) for x in history_path.read_text().splitlines()])
    assert [op.outcome for op in ops] == ["ok", "ok", "ok"]
