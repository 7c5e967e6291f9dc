"""The state machine: every (state, transition) pair for every kind of instant, payload shapes,
rollback intents, and purity."""

from __future__ import annotations

from typing import Any

import pytest

from lakewarden.table.instant import Action, Transition
from lakewarden.table.state_machine import Rejected, Replayer, apply, judge
from lakewarden.table.stats import CommitStats, FileGroupId, WorkloadProfile, WriteStat
from lakewarden.table.timeline_state import InstantState, TimelineEntry, TimelineState

T0, T1, T2 = "20240101000000000", "20240101000000001", "20240101000000002"
FG = FileGroupId(partition_path="p=1", file_id="fg-x")
WORKLOAD = WorkloadProfile(operation="upsert", file_groups=(FG,))
STATS = CommitStats(
    operation="upsert",
    write_stats=(
        WriteStat(
            file_group=FG, path="p=1/x.parquet", base_instant=T1, num_records=1, size_bytes=9
        ),
    ),
)

# Expected verdicts: "ok", or a key of REASONS (a fragment the rejection reason must contain).
REASONS = {
    "exists": "already exists",
    "never": "was never requested",
    "terminal": "(terminal)",
    "no-cancel": "is not a cancellable plan",
    "only-req": "inflight only follows requested",
    "unnamed": "a retried attempt's inflight must name its executor attempt",
    "cancelled": "has a cancel request: it can never complete",
    "from-infl": "completes only from inflight",
    "pend-plan": "only a pending plan can be cancelled",
    "after-cr": "aborted only follows cancel_requested",
    "ingest": "only ingestion is rolled back",
    "pend-w": "only a pending write can be rolled back",
}
COLUMNS = [
    Transition.REQUESTED,
    Transition.INFLIGHT,
    Transition.COMPLETED,
    Transition.CANCEL_REQUESTED,
    Transition.ABORTED,
    Transition.ROLLED_BACK,
]
_TERMINAL = "exists terminal terminal terminal terminal terminal"
# Rows: the instant's current state ("absent": no entry yet); columns: COLUMNS. States a kind
# can never reach (a commit in cancel_requested) are listed too: the machine stays closed.
GRIDS = {
    "ingestion": """
        absent            ok     never    never     never     never     never
        requested         exists ok       from-infl no-cancel no-cancel ok
        inflight          exists only-req ok        no-cancel no-cancel ok
        cancel_requested  exists only-req cancelled no-cancel no-cancel pend-w
    """,
    "plan": """
        absent            ok     never    never     never     never     never
        requested         exists ok       from-infl no-cancel no-cancel ingest
        inflight          exists unnamed  ok        no-cancel no-cancel ingest
        cancel_requested  exists only-req cancelled no-cancel no-cancel ingest
    """,
    "cancellable-plan": """
        absent            ok     never    never     never     never     never
        requested         exists ok       from-infl ok        after-cr  ingest
        inflight          exists unnamed  ok        ok        after-cr  ingest
        cancel_requested  exists only-req cancelled pend-plan ok        ingest
    """,
    "no-workload": """
        absent            ok     never    never     never     never     never
        requested         exists ok       ok        no-cancel no-cancel ingest
        inflight          exists only-req ok        no-cancel no-cancel ingest
        cancel_requested  exists only-req cancelled no-cancel no-cancel ingest
    """,
}
KINDS: dict[str, tuple[Action, bool, str]] = {  # name: (action, cancellable, grid)
    "commit": (Action.COMMIT, False, "ingestion"),
    "deltacommit": (Action.DELTACOMMIT, False, "ingestion"),
    "compaction": (Action.COMPACTION, False, "plan"),
    "clustering": (Action.CLUSTERING, False, "plan"),
    "compaction-cancellable": (Action.COMPACTION, True, "cancellable-plan"),
    "clustering-cancellable": (Action.CLUSTERING, True, "cancellable-plan"),
    "clean": (Action.CLEAN, False, "no-workload"),
    "rollback": (Action.ROLLBACK, False, "no-workload"),
}


def _grid(name: str) -> dict[tuple[str, Transition], str]:
    cells: dict[tuple[str, Transition], str] = {}
    rows = [line.split() for line in GRIDS[name].strip().splitlines()]
    rows += [[state, *_TERMINAL.split()] for state in ("completed", "aborted", "rolled_back")]
    for state, *verdicts in rows:
        assert len(verdicts) == len(COLUMNS), state
        cells.update({(state, col): v for col, v in zip(COLUMNS, verdicts, strict=True)})
    return cells


CASES = [
    pytest.param(kind, state, transition, verdict, id=f"{kind}-{state}-{transition}")
    for kind, (_, _, grid) in KINDS.items()
    for (state, transition), verdict in _grid(grid).items()
]


def _plan(action: Action) -> Any:
    if action in (Action.COMPACTION, Action.CLUSTERING):
        return {"file_groups": [FG.model_dump()], "strategy": "sort"}
    if action is Action.ROLLBACK:
        return {"target": T0}
    return None


def _payload(action: Action, cancellable: bool, transition: Transition) -> dict[str, Any]:
    if transition is Transition.REQUESTED:
        return {"operation": action.value, "cancellable": cancellable, "plan": _plan(action)}
    if transition is Transition.INFLIGHT:
        return WORKLOAD.model_dump(mode="json")
    if transition is Transition.COMPLETED:
        return STATS.model_dump(mode="json")
    return {"reason": "test"}


def _fixture(action: Action, cancellable: bool, state: str) -> TimelineState:
    """T0: an ingestion instant (the rollback target); T1: the instant under test in
    ``state``. The target is pending while the rollback is not requested yet, rolled back
    afterwards (so that the rollback may complete)."""
    target_state = Transition.INFLIGHT if state == "absent" else Transition.ROLLED_BACK
    instants = {
        T0: InstantState(
            instant=T0,
            action=Action.COMMIT,
            state=target_state,
            operation="insert",
            requested_seq=0,
            last_seq=1,
            workload=WorkloadProfile(operation="insert"),
            rollback_by=None if state == "absent" or action is not Action.ROLLBACK else T1,
        )
    }
    last_requested = T0
    if state != "absent":
        last_requested = T1
        current = Transition(state)
        plan = _plan(action)
        instants[T1] = InstantState(
            instant=T1,
            action=action,
            state=current,
            cancellable=cancellable,
            operation=action.value,
            requested_seq=2,
            last_seq=3,
            plan=plan,
            plan_file_groups=(FG,) if isinstance(plan, dict) and "file_groups" in plan else (),
            workload=None if current is Transition.REQUESTED else WORKLOAD,
            commit=STATS if current is Transition.COMPLETED else None,
            completed_seq=3 if current is Transition.COMPLETED else None,
        )
    return TimelineState(instants=instants, tail_seq=3, last_requested_time=last_requested)


def _entry(
    seq: int, instant: str, action: Action, transition: Transition, payload: dict[str, Any]
) -> TimelineEntry:
    return TimelineEntry(
        seq=seq,
        instant=instant,
        action=action,
        transition=transition,
        actor="test",
        lock_token=7,
        wall_time_ms=0,
        payload=payload,
    )


@pytest.mark.parametrize(("kind", "state", "transition", "verdict"), CASES)
def test_every_state_transition_pair(
    kind: str, state: str, transition: Transition, verdict: str
) -> None:
    action, cancellable, _ = KINDS[kind]
    before = _fixture(action, cancellable, state)
    entry = _entry(4, T1, action, transition, _payload(action, cancellable, transition))
    after = apply(before, entry)
    if verdict == "ok":
        assert isinstance(after, TimelineState), after
        moved = after.get(T1)
        assert moved is not None
        assert moved.state is transition
        assert moved.last_seq == 4 and moved.lock_token == 7
        assert after.tail_seq == 4
    else:
        assert isinstance(after, Rejected)
        assert REASONS[verdict] in after.reason
    assert before == _fixture(action, cancellable, state)  # apply is pure


def test_the_pairs_table_is_complete() -> None:
    states = {"absent", *(t.value for t in Transition)}
    for _, _, grid in KINDS.values():
        assert set(_grid(grid)) == {(s, t) for s in states for t in Transition}
    assert {action for action, _, _ in KINDS.values()} == set(Action)


def test_completed_fields_are_recorded() -> None:
    state = _fixture(Action.COMMIT, False, "inflight")
    after = apply(
        state,
        _entry(
            4,
            T1,
            Action.COMMIT,
            Transition.COMPLETED,
            _payload(Action.COMMIT, False, Transition.COMPLETED),
        ),
    )
    assert isinstance(after, TimelineState)
    done = after.get(T1)
    assert done is not None and done.completed_seq == 4 and done.commit == STATS
    assert done.workload is None  # the write statistics are authoritative once completed
    assert [i.instant for i in after.completed()] == [T1]
    assert after.pending() == []


def test_an_overwrite_keeps_its_claim_on_every_file_group() -> None:
    everything = WorkloadProfile(operation="overwrite", replaces_all=True)
    state = _fixture(Action.COMMIT, False, "inflight")
    state = state.model_copy(
        update={
            "instants": {
                **state.instants,
                T1: state.instants[T1].model_copy(update={"workload": everything}),
            }
        }
    )
    after = apply(
        state,
        _entry(
            4,
            T1,
            Action.COMMIT,
            Transition.COMPLETED,
            _payload(Action.COMMIT, False, Transition.COMPLETED),
        ),
    )
    assert isinstance(after, TimelineState)
    done = after.get(T1)
    assert done is not None and done.workload == everything


# -- the fence: a retried plan attempt's inflight ------------------------------------------------

# (kind, state, the attempt its latest inflight named, the entry, the attempt the entry names,
# verdict: "ok" or a fragment of the rejection). A retry's inflight fences every earlier
# attempt; a completion must then name the attempt the latest inflight names.
FENCE_ROWS = [
    ("plan", "requested", None, Transition.INFLIGHT, 5, "ok"),
    ("plan", "requested", None, Transition.INFLIGHT, None, "ok"),  # entries before attempts
    ("plan", "inflight", None, Transition.INFLIGHT, 6, "ok"),  # fences an unnamed attempt
    ("plan", "inflight", 5, Transition.INFLIGHT, 6, "ok"),
    ("plan", "inflight", 5, Transition.INFLIGHT, 5, "is already its attempt"),
    ("plan", "inflight", 5, Transition.INFLIGHT, None, "must name its executor attempt"),
    ("plan", "cancel_requested", 5, Transition.INFLIGHT, 6, "inflight only follows requested"),
    ("plan", "inflight", 6, Transition.COMPLETED, 5, "is fenced: only attempt 6"),
    ("plan", "inflight", 6, Transition.COMPLETED, None, "is fenced: only attempt 6"),
    ("plan", "inflight", 6, Transition.COMPLETED, 6, "ok"),
    ("plan", "inflight", None, Transition.COMPLETED, 5, "ok"),
    ("plan", "inflight", None, Transition.COMPLETED, None, "ok"),
    ("commit", "inflight", None, Transition.INFLIGHT, 6, "inflight only follows requested"),
]


@pytest.mark.parametrize(
    ("kind", "state", "current", "transition", "named", "verdict"),
    FENCE_ROWS,
    ids=[f"{k}-{s}-{c}-{t}-{n}" for k, s, c, t, n, _ in FENCE_ROWS],
)
def test_a_retry_fences_earlier_attempts(
    kind: str,
    state: str,
    current: int | None,
    transition: Transition,
    named: int | None,
    verdict: str,
) -> None:
    action = Action.CLUSTERING if kind == "plan" else Action.COMMIT
    before = _fixture(action, False, state)
    fixture = before.instants[T1].model_copy(update={"attempt": current})
    before = before.model_copy(update={"instants": {**before.instants, T1: fixture}})
    model = WORKLOAD if transition is Transition.INFLIGHT else STATS
    payload = model.model_copy(update={"attempt": named}).model_dump(mode="json")
    after = apply(before, _entry(4, T1, action, transition, payload))
    if verdict != "ok":
        assert isinstance(after, Rejected) and verdict in after.reason, after
        return
    assert isinstance(after, TimelineState), after
    moved = after.get(T1)
    assert moved is not None and moved.state is transition
    if transition is Transition.INFLIGHT:
        assert moved.attempt == named  # only the attempt named last may complete the plan


# -- requested ---------------------------------------------------------------------------------


def _requested(
    seq: int, instant: str, action: Action = Action.COMMIT, **payload: Any
) -> TimelineEntry:
    body = {"operation": "insert", "cancellable": False, "plan": None, **payload}
    return _entry(seq, instant, action, Transition.REQUESTED, body)


def test_requested_times_must_strictly_increase() -> None:
    state = apply(TimelineState(), _requested(0, T1))
    assert isinstance(state, TimelineState)
    assert state.last_requested() is not None and str(state.last_requested()) == T1
    for earlier in (T0, T1):
        verdict = apply(state, _requested(1, earlier))
        assert isinstance(verdict, Rejected)
    verdict = apply(state, _requested(1, T0))
    assert isinstance(verdict, Rejected)
    assert f"{T0} is not after the last requested instant {T1}" in verdict.reason
    assert isinstance(apply(state, _requested(1, T2)), TimelineState)


def test_only_plans_may_be_cancellable() -> None:
    verdict = apply(TimelineState(), _requested(0, T1, cancellable=True))
    assert isinstance(verdict, Rejected)
    assert "only compaction and clustering plans may be cancellable, not commit" in verdict.reason


@pytest.mark.parametrize(
    ("transition", "payload", "fragment"),
    [
        (Transition.REQUESTED, {"cancellable": False}, "operation: Field required"),
        (Transition.REQUESTED, {"operation": "x", "extra": 1}, "Extra inputs are not permitted"),
        (Transition.INFLIGHT, {"file_groups": []}, "WorkloadProfile"),
        (Transition.COMPLETED, {"operation": "x", "write_stats": [{}]}, "CommitStats"),
        (Transition.ROLLED_BACK, {}, "reason: Field required"),
        (Transition.ROLLED_BACK, {"reason": ""}, "ReasonPayload"),
    ],
)
def test_malformed_payloads_are_rejected(
    transition: Transition, payload: dict[str, Any], fragment: str
) -> None:
    start = "absent" if transition is Transition.REQUESTED else "inflight"
    if transition is Transition.INFLIGHT:
        start = "requested"
    state = _fixture(Action.COMMIT, False, start)
    instant = T2 if transition is Transition.REQUESTED else T1
    verdict = apply(state, _entry(4, instant, Action.COMMIT, transition, payload))
    assert isinstance(verdict, Rejected)
    assert "malformed" in verdict.reason and fragment in verdict.reason


@pytest.mark.parametrize(
    ("plan", "fragment"),
    [
        (None, "ServicePlan"),
        ({"file_groups": []}, "file_groups"),
        ({"file_groups": [{"file_id": "f"}]}, "partition_path"),
    ],
)
def test_plans_must_name_their_file_groups(plan: Any, fragment: str) -> None:
    verdict = apply(TimelineState(), _requested(0, T1, Action.CLUSTERING, plan=plan))
    assert isinstance(verdict, Rejected)
    assert fragment in verdict.reason


def test_entry_must_name_the_instants_action() -> None:
    state = _fixture(Action.COMMIT, False, "requested")
    verdict = apply(
        state,
        _entry(
            4,
            T1,
            Action.DELTACOMMIT,
            Transition.INFLIGHT,
            _payload(Action.DELTACOMMIT, False, Transition.INFLIGHT),
        ),
    )
    assert isinstance(verdict, Rejected)
    assert "is a commit, not a deltacommit" in verdict.reason


def test_apply_requires_the_next_seq() -> None:
    verdict = apply(TimelineState(), _requested(3, T1))
    assert isinstance(verdict, Rejected)
    assert "seq 3 does not follow tail seq -1" in verdict.reason


# -- rollback intents ---------------------------------------------------------------------------


def _intent_state() -> TimelineState:
    """T0 inflight commit; T1 a rollback requested for it."""
    state: TimelineState | Rejected = TimelineState()
    for entry in (
        _requested(0, T0),
        _entry(1, T0, Action.COMMIT, Transition.INFLIGHT, WORKLOAD.model_dump(mode="json")),
        _requested(2, T1, Action.ROLLBACK, operation="rollback", plan={"target": T0}),
    ):
        assert isinstance(state, TimelineState)
        state = apply(state, entry)
    assert isinstance(state, TimelineState)
    return state


def test_rollback_intent_makes_the_target_uncommittable() -> None:
    state = _intent_state()
    target = state.get(T0)
    assert target is not None and target.rollback_by == T1 and target.state is Transition.INFLIGHT
    verdict = apply(
        state,
        _entry(
            3,
            T0,
            Action.COMMIT,
            Transition.COMPLETED,
            _payload(Action.COMMIT, False, Transition.COMPLETED),
        ),
    )
    assert isinstance(verdict, Rejected)
    assert f"being rolled back by {T1}: it can never complete" in verdict.reason
    # the rollback cannot complete before its target is rolled back ...
    early = apply(
        state,
        _entry(
            3,
            T1,
            Action.ROLLBACK,
            Transition.COMPLETED,
            _payload(Action.ROLLBACK, False, Transition.COMPLETED),
        ),
    )
    assert isinstance(early, Rejected)
    assert "completes only after its target is rolled_back" in early.reason
    # ... and can after it
    rolled = apply(state, _entry(3, T0, Action.COMMIT, Transition.ROLLED_BACK, {"reason": "hb"}))
    assert isinstance(rolled, TimelineState)
    done = apply(
        rolled,
        _entry(
            4,
            T1,
            Action.ROLLBACK,
            Transition.COMPLETED,
            _payload(Action.ROLLBACK, False, Transition.COMPLETED),
        ),
    )
    assert isinstance(done, TimelineState)


@pytest.mark.parametrize(
    ("target", "fragment"),
    [
        (T0, "already targets: resume that one"),
        ("20240101000000009", "is not an ingestion instant"),
        (T1, "is not an ingestion instant"),
    ],
)
def test_rollback_intent_needs_an_untargeted_pending_ingestion(target: str, fragment: str) -> None:
    state = _intent_state()
    verdict = apply(
        state, _requested(3, T2, Action.ROLLBACK, operation="rollback", plan={"target": target})
    )
    assert isinstance(verdict, Rejected)
    assert fragment in verdict.reason


def test_rollback_intent_of_a_completed_instant_is_rejected() -> None:
    state = _fixture(Action.COMMIT, False, "completed")
    verdict = apply(
        state, _requested(4, T2, Action.ROLLBACK, operation="rollback", plan={"target": T1})
    )
    assert isinstance(verdict, Rejected)
    assert f"targets {T1}, which is completed, not pending" in verdict.reason


# -- replay -----------------------------------------------------------------------------------


def test_replayer_agrees_with_apply_and_reports_rejections() -> None:
    entries = [
        _requested(0, T0),
        _entry(
            1,
            T0,
            Action.COMMIT,
            Transition.COMPLETED,
            _payload(Action.COMMIT, False, Transition.COMPLETED),
        ),  # illegal: not inflight
        _entry(2, T0, Action.COMMIT, Transition.INFLIGHT, WORKLOAD.model_dump(mode="json")),
        _entry(
            3,
            T0,
            Action.COMMIT,
            Transition.COMPLETED,
            _payload(Action.COMMIT, False, Transition.COMPLETED),
        ),
        _requested(4, T0),  # illegal: exists
    ]
    folded = TimelineState()
    for entry in entries:
        verdict = apply(folded, entry)
        folded = (
            verdict
            if isinstance(verdict, TimelineState)
            else folded.model_copy(update={"tail_seq": entry.seq})
        )
    replayer = Replayer(TimelineState())
    verdicts = [replayer.feed(e) for e in entries]
    replayed = replayer.state()
    assert replayed.instants == folded.instants
    assert replayed.tail_seq == 4
    assert [r.seq for r in replayed.rejected] == [1, 4]
    assert [v is None for v in verdicts] == [True, False, True, True, False]
    assert "completes only from inflight" in replayed.rejected[0].reason
    assert judge(replayed, entries[0]) == Rejected(f"instant {T0} already exists (state completed)")
