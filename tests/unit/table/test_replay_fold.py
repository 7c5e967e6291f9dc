"""Replay's folds of the timeline topic decide exactly what the state machine's ``apply`` does.

Two folds are checked against the reference (validated ``TimelineEntry`` objects folded one by
one with ``apply``, a fresh pydantic validation of every payload): ``rebuild_state`` over
``entries_from_topic`` (entries built from the decoded events without re-validation, payload
dicts and their validated models shared between equal texts by ``SharedPayloads``, instant
states copied by ``_frozen.evolve`` / ``construct``), and ``TopicReplay`` fed the events as
they arrive, which is what ``lakewarden replay`` runs: its fast path (``history._lean_fold``)
takes the common case and hands every other entry to the state machine. And every instant
state the fold built must equal what pydantic makes of the same values, so no shortcut
produced a value validation would have changed.

Histories are generated over a few instants of every action with payloads drawn from a small
pool (valid and malformed, so that texts repeat and sharing is exercised), transitions in any
order, and the occasional out-of-order or repeated seq.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from _hypothesis_profiles import examples
from _reference_fold import apply_in_seq_order, timeline_entry
from hypothesis import given, settings
from hypothesis import strategies as st

from lakewarden.history import Recorded, TopicReplay, entries_from_topic
from lakewarden.history.replay import rebuild_state
from lakewarden.table._frozen import construct, evolve
from lakewarden.table.instant import Action, Transition
from lakewarden.table.timeline_state import InstantState, TimelineEntry, TimelineState

INSTANTS = [f"202401010000000{i:02d}" for i in range(6)]
FG = {"partition_path": "p=1", "file_id": "fg-1"}
FG2 = {"partition_path": "p=2", "file_id": "fg-2"}
STAT = {
    "file_group": FG,
    "path": "p=1/x.parquet",
    "base_instant": INSTANTS[0],
    "num_records": 1,
    "size_bytes": 9,
}
PAYLOADS: dict[Transition, list[dict[str, Any]]] = {
    Transition.REQUESTED: [
        {"operation": "insert", "cancellable": False, "plan": None},
        {"operation": "compact", "cancellable": True, "plan": {"file_groups": [FG]}},
        {"operation": "cluster", "cancellable": False, "plan": {"file_groups": [FG2]}},
        {"operation": "rollback", "plan": {"target": INSTANTS[0]}},
        {"operation": "rollback", "plan": {"target": INSTANTS[1]}},
        {"operation": "clean", "plan": {"kind": "clean", "files": []}},
        {"operation": "upsert", "plan": {"kind": "job", "job_id": "j-1"}},
        {"operation": ""},  # malformed: empty operation
        {"operation": "insert", "bogus": 1},  # malformed: extra field
    ],
    Transition.INFLIGHT: [
        {"operation": "insert", "file_groups": [FG]},
        {"operation": "upsert", "file_groups": [FG, FG2], "replaces_all": False},
        {"operation": "insert_overwrite_table", "file_groups": [], "replaces_all": True},
        {"file_groups": "nope"},  # malformed
    ],
    Transition.COMPLETED: [
        {"operation": "insert", "write_stats": [STAT]},
        {"operation": "insert", "write_stats": []},
        {"operation": "upsert", "write_stats": [STAT], "replaced_file_groups": [FG2]},
        {"write_stats": 3},  # malformed
    ],
    Transition.CANCEL_REQUESTED: [{"reason": "ops"}, {}],
    # ``{}`` under three transitions: one text, one model, three different rejections.
    Transition.ABORTED: [{"reason": "cancelled"}, {"reason": ""}, {}],
    Transition.ROLLED_BACK: [
        {"reason": "heartbeat expired"},
        {},
        {"version": 2, "reason": "job failed", "failed_stage": "rename", "job_id": "j"},
    ],
}


# The legal paths of an instant, by kind (a rollback's target is rolled back in between).
PATHS: dict[str, list[list[Transition]]] = {
    "ingestion": [
        [Transition.REQUESTED, Transition.INFLIGHT, Transition.COMPLETED],
        [Transition.REQUESTED, Transition.INFLIGHT, Transition.ROLLED_BACK],
        [Transition.REQUESTED, Transition.ROLLED_BACK],
        [Transition.REQUESTED, Transition.INFLIGHT],
    ],
    "plan": [
        [Transition.REQUESTED, Transition.INFLIGHT, Transition.COMPLETED],
        [Transition.REQUESTED, Transition.CANCEL_REQUESTED, Transition.ABORTED],
        [Transition.REQUESTED, Transition.INFLIGHT, Transition.CANCEL_REQUESTED],
    ],
    "clean": [[Transition.REQUESTED, Transition.COMPLETED]],
}
KINDS = [
    (Action.COMMIT, "ingestion", 0),
    (Action.DELTACOMMIT, "ingestion", 6),
    (Action.COMPACTION, "plan", 1),
    (Action.CLUSTERING, "plan", 2),
    (Action.CLEAN, "clean", 5),
    (Action.ROLLBACK, "clean", 3),
]


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Decoded ``TimelineTransition`` records, in the order a topic would hold them: each
    instant follows a legal path (mostly valid payloads from ``PAYLOADS``, so equal texts
    recur), the instants' steps interleave, and now and then a step is noise (another
    transition, action or payload) or the seq repeats or skips."""
    scripts = []
    for instant in INSTANTS:
        action, kind, requested = draw(st.sampled_from(KINDS))
        steps = []
        for transition in draw(st.sampled_from(PATHS[kind])):
            pool = PAYLOADS[transition]
            payload = pool[requested] if transition is Transition.REQUESTED else None
            if payload is None or draw(st.integers(0, 9)) == 0:
                payload = draw(st.sampled_from(pool))
            if draw(st.integers(0, 14)) == 0:
                transition = draw(st.sampled_from(list(Transition)))
                payload = draw(st.sampled_from(PAYLOADS[transition]))
            steps.append((instant, action, transition, payload))
        scripts.append(steps)
    records = []
    seq = 0
    opened = 0  # instant times only grow: instant i opens after instants < i did
    while any(scripts):
        ready = [s for i, s in enumerate(scripts) if s and (i < opened or i == opened)]
        script = draw(st.sampled_from(ready))
        opened = max(opened, scripts.index(script) + 1)
        instant, action, transition, payload = script.pop(0)
        seq += draw(st.sampled_from([1] * 12 + [0, 2]))  # mostly the next seq
        records.append(
            {
                "envelope": {"table_id": "t", "event_time": 0},
                "seq": max(seq - 1, 0),
                "instant": instant,
                "action": str(action),
                "transition": str(transition),
                "actor": draw(st.sampled_from(["writer", "cleaner"])),
                "lock_token": draw(st.sampled_from([None, 3, 4])),
                "wall_time": 1_700_000_000_000,
                "payload": json.dumps(payload, sort_keys=True),
            }
        )
    return records


def _reference(records: list[dict[str, Any]]) -> TimelineState:
    """Validated entries (first version of each seq, as the topic side keeps it), folded in
    seq order by ``apply``, every payload validated afresh."""
    entries: dict[int, TimelineEntry] = {}
    for r in records:
        entry = timeline_entry(r)
        entries.setdefault(entry.seq, entry)
    return apply_in_seq_order(entries)


@settings(max_examples=examples(100))
@given(histories())
def test_the_replay_fold_equals_the_state_machine(records: list[dict[str, Any]]) -> None:
    topic, _ = entries_from_topic(Recorded("TimelineTransition", r) for r in records)
    replayed = rebuild_state(topic)
    reference = _reference(records)

    assert replayed.instants == reference.instants
    assert replayed.tail_seq == reference.tail_seq
    assert replayed.last_requested_time == reference.last_requested_time
    assert [(r.seq, r.reason) for r in replayed.rejected] == list(reference.rejected)
    for state in replayed.instants.values():  # what pydantic makes of the same values
        assert InstantState.model_validate(state.model_dump()) == state
    while_read = TopicReplay()  # folded as the records arrive, as ``lakewarden replay`` does
    for r in records:
        while_read.feed(Recorded("TimelineTransition", r))
    assert while_read.state() == replayed
    summary = while_read.summary()
    assert summary.rejected == replayed.rejected and summary.tail_seq == replayed.tail_seq
    assert summary.states == Counter(str(i.state) for i in replayed.instants.values())


def test_entries_with_equal_payload_texts_share_one_payload() -> None:
    text = json.dumps({"reason": "r"})
    records = [
        {
            "envelope": {"table_id": "t", "event_time": 0},
            "seq": seq,
            "instant": INSTANTS[0],
            "action": "commit",
            "transition": "rolled_back",
            "actor": "a",
            "lock_token": None,
            "wall_time": 0,
            "payload": text,
        }
        for seq in (0, 1)
    ]
    topic, _ = entries_from_topic(Recorded("TimelineTransition", r) for r in records)
    assert topic[0].payload is topic[1].payload


def test_construct_and_evolve_build_what_pydantic_builds() -> None:
    values = {
        "instant": INSTANTS[0],
        "action": Action.COMMIT,
        "state": Transition.REQUESTED,
        "requested_seq": 0,
        "last_seq": 0,
    }
    built = construct(InstantState, values)
    assert built == InstantState(**values)
    assert built.model_fields_set == set(values)
    moved = evolve(built, {"state": Transition.INFLIGHT, "last_seq": 1})
    assert moved == built.model_copy(update={"state": Transition.INFLIGHT, "last_seq": 1})
    assert moved.model_fields_set == set(values)
    assert built.state is Transition.REQUESTED  # the original is untouched


def test_construct_refuses_missing_and_unknown_fields() -> None:
    with pytest.raises(TypeError, match="missing .*requested_seq"):
        construct(InstantState, {"instant": INSTANTS[0]})
    with pytest.raises(TypeError, match="unknown colour"):
        construct(
            InstantState,
            {
                "instant": INSTANTS[0],
                "action": Action.COMMIT,
                "state": Transition.REQUESTED,
                "requested_seq": 0,
                "last_seq": 0,
                "colour": "red",
            },
        )
