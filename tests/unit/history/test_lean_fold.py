"""Replay's lean fold decides exactly what the state machine decides.

``TopicReplay`` builds ``LeanEntry`` tuples and folds them with ``LeanFold``, which takes the
common ingestion path (requested -> inflight -> completed, nothing racing) itself and hands
everything else to ``state_machine.judge``. The reference is the state machine as every
writer runs it: validated ``TimelineEntry`` models (the first version of each seq), folded in
seq order by ``apply`` with a fresh pydantic validation of every payload. On generated
histories the two must agree on every instant state (its fields and which fields are set),
the tail, the last requested instant, the rejections with their reasons, and the entries.

The histories aim at the fast path's edges: mostly ingestion instants whose steps interleave
(so completions race and conflict over a few file groups), overwrites that replace all,
pending plans (cancellable or not), rollbacks of fast instants, cancels of ingestion, clean
instants, payloads drawn from valid and malformed ones (texts repeat, so payload sharing is
exercised), noise (another transition, action, actor or token), instants opened out of time
order, repeated, redelivered, altered, skipped and swapped seqs, and records that do not make
a ``LeanEntry`` (bad instant, empty actor, unknown enum, payload not an object, a datetime
time, a missing field, payload texts JSON parsers may read differently). Derandomized in CI
(``tests/_hypothesis_profiles.py``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from _hypothesis_profiles import examples
from _reference_fold import apply_in_seq_order, timeline_entry
from confluent_kafka import KafkaError, Message
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lakewarden.events.codec import EventEncodeError, default_codec, epoch_ms_codec
from lakewarden.history import Recorded, TopicReplay
from lakewarden.history._lean_fold import LeanFold
from lakewarden.history._message_fold import MessageFold
from lakewarden.table._frozen import evolve
from lakewarden.table.timeline_state import InstantState, TimelineEntry, TimelineState

INSTANTS = [f"20240101000000{i:03d}" for i in range(8)]
ENVELOPE = {"table_id": "t", "event_time": 0, "producer_id": "test", "schema_version": 1}
GROUPS = [{"partition_path": f"p={i}", "file_id": f"{i:08d}-0000"} for i in range(3)]


def _stat(group: int) -> dict[str, Any]:
    fg = GROUPS[group]
    return {
        "file_group": fg,
        "path": f"{fg['partition_path']}/{fg['file_id']}_1-0-1_x.parquet",
        "base_instant": INSTANTS[0],
        "num_records": 3,
        "size_bytes": 100,
    }


REQUESTED = [
    {"operation": "insert", "cancellable": False, "plan": None},
    {"operation": "upsert"},
    {"operation": "insert", "plan": {"kind": "job", "job_id": "j-1"}},
    {"operation": "insert", "plan": {"kind": "untyped", "data": {"a": 1}}},
    {"operation": "insert", "cancellable": True},  # only plans may be cancellable
    {"operation": "compact", "plan": {"file_groups": [GROUPS[0]]}},  # wrong kind for ingestion
    {"operation": ""},  # malformed
    {"operation": "insert", "bogus": 1},  # malformed
    {"operation": "insert", "plan": {"kind": "job", "batch": {"query_id": "q", "batch_id": 3}}},
    {"operation": "insert", "cancellable": 0},  # valid (lax), not the plain shape
    {"operation": "insert", "plan": {"kind": "job", "job_id": ""}},  # malformed job plan
]
PLAN_REQUESTED = [
    {"operation": "compact", "cancellable": True, "plan": {"file_groups": [GROUPS[0]]}},
    {"operation": "cluster", "cancellable": False, "plan": {"file_groups": [GROUPS[1]]}},
    {"operation": "compact", "cancellable": False, "plan": {"file_groups": [GROUPS[2]]}},
]
INFLIGHT = [
    {"operation": "insert", "file_groups": [GROUPS[0]]},
    {"operation": "upsert", "file_groups": [GROUPS[1]]},
    {"operation": "upsert", "file_groups": [GROUPS[1], GROUPS[2]], "replaces_all": False},
    {"operation": "insert_overwrite_table", "file_groups": [], "replaces_all": True},
    {"operation": "insert", "file_groups": []},
    {"file_groups": "nope"},  # malformed
]
COMPLETED = [
    {"operation": "insert", "write_stats": [_stat(0)]},
    {"operation": "upsert", "write_stats": [_stat(1)]},
    {"operation": "upsert", "write_stats": [_stat(2)], "replaced_file_groups": [GROUPS[1]]},
    {"operation": "insert", "write_stats": []},
    {"write_stats": 3},  # malformed
]
REASONS = [{"reason": "heartbeat expired"}, {}, {"version": 2, "reason": "x", "job_id": "j"}]
PAYLOADS: dict[str, list[dict[str, Any]]] = {
    "requested": REQUESTED + PLAN_REQUESTED,
    "inflight": INFLIGHT,
    "completed": COMPLETED,
    "cancel_requested": REASONS,
    "aborted": REASONS,
    "rolled_back": REASONS,
}
PATHS = {
    "ingestion": [
        ["requested", "inflight", "completed"],
        ["requested", "inflight", "completed"],
        ["requested", "inflight", "rolled_back"],
        ["requested", "rolled_back"],
        ["requested", "inflight"],
        ["requested", "inflight", "cancel_requested", "aborted"],
    ],
    "plan": [
        ["requested", "inflight", "completed"],
        ["requested", "cancel_requested", "aborted"],
        ["requested", "inflight"],
    ],
    "clean": [["requested", "completed"]],
    "rollback": [["requested", "completed"], ["requested"]],
}
KINDS = ["ingestion"] * 6 + ["plan", "clean", "rollback"]
ACTIONS = {
    "ingestion": ["commit", "deltacommit"],
    "plan": ["compaction", "clustering"],
    "clean": ["clean"],
    "rollback": ["rollback"],
}
# Records that make no ``LeanEntry``: each field value replaces the generated one.
ODD_FIELDS: list[dict[str, Any]] = [
    {"instant": "2024"},
    {"instant": "2024010100000000x"},  # 17 characters, not all digits
    {"instant": "２０２４０１０１０００００００００"},  # full-width digits: not \d{17} for Avro
    {"actor": ""},
    {"action": "bogus"},
    {"transition": "finished"},
    {"payload": "[1, 2]"},
    {"payload": "not json"},
    {"payload": ""},
    {"payload": None},
    {"wall_time": datetime(2024, 1, 1, tzinfo=UTC)},
    {"seq": -1},
    {"lock_token": "3"},
    # Payload texts pydantic's JSON parser and json.loads may read differently.
    {"payload": '{"operation": "insert", "operation": "upsert", "file_groups": []}'},
    {"payload": '{"operation": "\\ud800", "file_groups": [], "write_stats": []}'},
    {"payload": '{"operation": "x", "write_stats": [], "extra_metadata": {"k": NaN}}'},
    {"payload": '{"operation": "insert", "replaces_all": "true", "write_stats": []}'},
]


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Decoded ``TimelineTransition`` records in the order a topic would hold them."""
    count = draw(st.integers(1, len(INSTANTS)))
    scripts = []
    for index in range(count):
        kind = draw(st.sampled_from(KINDS))
        action = draw(st.sampled_from(ACTIONS[kind]))
        steps = []
        for transition in draw(st.sampled_from(PATHS[kind])):
            payload = _payload(draw, kind, transition, index)
            if draw(st.integers(0, 19)) == 0:  # noise: another transition, action or payload
                transition = draw(st.sampled_from(sorted(PAYLOADS)))
                action = draw(st.sampled_from([a for acts in ACTIONS.values() for a in acts]))
                payload = draw(st.sampled_from(PAYLOADS[transition]))
            steps.append([INSTANTS[index], action, transition, payload])
        scripts.append(steps)
    # Mostly opened in time order; sometimes not (a requested time that is not increasing).
    order = list(range(count))
    if draw(st.integers(0, 4)) == 0:
        order = draw(st.permutations(order))
    records: list[dict[str, Any]] = []
    seq, opened = 0, 0
    while any(scripts):
        ready = [order[i] for i in range(count) if scripts[order[i]] and i <= opened]
        pick = draw(st.sampled_from(ready))
        opened = max(opened, order.index(pick) + 1)
        instant, action, transition, payload = scripts[pick].pop(0)
        record = {
            "envelope": {"table_id": "t", "event_time": 0},
            "seq": seq,
            "instant": instant,
            "action": action,
            "transition": transition,
            "actor": draw(st.sampled_from(["writer", "cleaner"])),
            "lock_token": draw(st.sampled_from([None, 3, 4])),
            "wall_time": 1_700_000_000_000 + seq,
            "payload": json.dumps(payload, sort_keys=draw(st.booleans())),
        }
        if draw(st.integers(0, 24)) == 0:
            record.update(draw(st.sampled_from(ODD_FIELDS)))
        records.append(record)
        _seq_noise(draw, records)
        seq += draw(st.sampled_from([1] * 20 + [0, 2]))  # mostly the next seq
    return records


def _payload(draw: st.DrawFn, kind: str, transition: str, index: int) -> dict[str, Any]:
    if transition == "requested" and kind == "plan":
        return draw(st.sampled_from(PLAN_REQUESTED))
    if transition == "requested" and kind == "rollback":
        target = draw(st.integers(0, max(index - 1, 0)))
        return {"operation": "rollback", "plan": {"target": INSTANTS[target]}}
    if transition == "requested" and kind == "clean":
        return {"operation": "clean", "plan": {"kind": "clean", "files": []}}
    if transition == "completed" and kind in ("clean", "rollback"):
        return {"operation": kind, "write_stats": []}
    pool = PAYLOADS[transition]
    if transition == "requested":  # mostly a valid ingestion request
        return pool[0] if draw(st.integers(0, 3)) else draw(st.sampled_from(pool))
    return draw(st.sampled_from(pool))


def _seq_noise(draw: st.DrawFn, records: list[dict[str, Any]]) -> None:
    """Now and then: the last event redelivered, redelivered altered, or swapped with the
    one before it (an appender publishing out of order)."""
    roll = draw(st.integers(0, 29))
    if roll == 0:
        records.append(dict(records[-1]))
    elif roll == 1:
        records.append({**records[-1], "actor": "someone-else"})
    elif roll == 2 and len(records) > 1:
        records[-1], records[-2] = records[-2], records[-1]


def _reference(records: list[dict[str, Any]]) -> tuple[dict[int, TimelineEntry], TimelineState]:
    """The entries (validated; the first version of each seq; records that do not validate
    skipped) and ``apply`` folded over them in seq order, every payload validated afresh."""
    entries: dict[int, TimelineEntry] = {}
    for r in records:
        try:
            entry = timeline_entry(r)
        except ValueError:
            continue
        entries.setdefault(entry.seq, entry)
    return entries, apply_in_seq_order(entries)


def _replayed(records: list[dict[str, Any]]) -> TopicReplay:
    replay = TopicReplay()
    for r in records:
        replay.feed(Recorded("TimelineTransition", r))
    return replay


def _on_the_topic(records: list[dict[str, Any]]) -> list[tuple[bytes, dict[str, Any] | None]]:
    """Each record as ``lakewarden replay`` finds it on the topic: the encoded message and
    the record it decodes to; a record Avro cannot encode (a wrong type, an unknown enum, a
    null payload) cannot be there, so a corrupt message takes its place (record None)."""
    found: list[tuple[bytes, dict[str, Any] | None]] = []
    for r in records:
        envelope = {**ENVELOPE, "event_id": f"e-{len(found)}"}
        try:
            value = default_codec().encode("TimelineTransition", {**r, "envelope": envelope})
        except EventEncodeError:
            found.append((b"\xc3\x01 not an event", None))
        else:
            found.append((value, epoch_ms_codec().decode(value).record))
    return found


def _replayed_from_messages(records: list[dict[str, Any]]) -> tuple[TopicReplay, int]:
    """``MessageFold`` over the messages of ``records``, three to a batch (so the in-order
    case resumes across batches); and how many messages it reported unreadable."""
    messages = [
        Message(topic="tl", partition=0, offset=i, key=b"t", value=value, timestamp=(1, i))
        for i, (value, _) in enumerate(_on_the_topic(records))
    ]
    replay = TopicReplay()
    fold = MessageFold(replay, "t", epoch_ms_codec())
    unreadable = sum(len(fold.fold(messages[i : i + 3])) for i in range(0, len(messages), 3))
    return replay, unreadable


def _assert_same(records: list[dict[str, Any]], *, as_messages: bool = False) -> None:
    """The lean fold (``feed``; with ``as_messages``, ``MessageFold`` over the encoded
    records) decides what the reference decides."""
    if as_messages:
        topic = _on_the_topic(records)
        replay, unreadable = _replayed_from_messages(records)
        records = [record for _, record in topic if record is not None]
        assert unreadable == len(topic) - len(records)
    else:
        replay = _replayed(records)
    lean = replay.state()
    entries, reference = _reference(records)

    assert dict(replay.entries) == entries
    assert lean.instants == reference.instants
    for name, state in lean.instants.items():  # built as the handlers build them
        assert state.model_fields_set == reference.instants[name].model_fields_set, name
    assert lean.tail_seq == reference.tail_seq
    assert lean.last_requested_time == reference.last_requested_time
    assert [(r.seq, r.reason) for r in lean.rejected] == list(reference.rejected)
    for rejection in lean.rejected:
        entry = entries[rejection.seq]
        assert (rejection.instant, rejection.action, rejection.transition) == (
            entry.instant,
            entry.action,
            entry.transition,
        )


def _record(seq: int, instant: int, transition: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "envelope": {"table_id": "t", "event_time": 0},
        "seq": seq,
        "instant": INSTANTS[instant],
        "action": "commit",
        "transition": transition,
        "actor": "writer",
        "lock_token": seq + 1,
        "wall_time": 1_700_000_000_000,
        "payload": json.dumps(payload),
    }


# Two writers of one file group racing: the second completion conflicts (slow path).
RACE = [
    _record(0, 0, "requested", REQUESTED[0]),
    _record(1, 1, "requested", REQUESTED[0]),
    _record(2, 0, "inflight", INFLIGHT[0]),
    _record(3, 1, "inflight", INFLIGHT[0]),
    _record(4, 1, "completed", COMPLETED[0]),
    _record(5, 0, "completed", COMPLETED[0]),
]


@settings(max_examples=examples(150))
@given(histories())
@example(RACE)
def test_the_lean_fold_decides_what_the_state_machine_decides(
    records: list[dict[str, Any]],
) -> None:
    _assert_same(records)
    _assert_same(records, as_messages=True)  # the path of ``lakewarden replay``


def _sequential() -> list[dict[str, Any]]:
    return [
        _record(3 * i + step, i, transition, payload)
        for i in range(len(INSTANTS))
        for step, (transition, payload) in enumerate(
            [
                ("requested", REQUESTED[0]),
                ("inflight", INFLIGHT[i % 3]),
                ("completed", COMPLETED[i % 3]),
            ]
        )
    ]


def test_a_sequential_history_stays_on_the_fast_path() -> None:
    """The common path is taken without the state machine (else the property above would
    only prove the slow path), and its states are the state machine's."""
    records = _sequential()
    replay = _replayed(records)
    fold = replay._fold
    assert isinstance(fold, LeanFold)
    assert all(type(s) is list for s in fold._instants.values())  # none left the fast path
    _assert_same(records)


@pytest.mark.parametrize("odd", range(len(ODD_FIELDS)))
@pytest.mark.parametrize("at", [3, 4, 5])  # an instant's requested, inflight, completed
def test_a_record_that_makes_no_lean_entry_is_decided_alike_on_both_paths(
    odd: int, at: int
) -> None:
    """Each odd record in the middle of the fast path (the property draws them rarely)."""
    records = _sequential()
    records[at] = {**records[at], **ODD_FIELDS[odd]}
    _assert_same(records)
    _assert_same(records, as_messages=True)


class _InOrderOnly(TopicReplay):
    """Fails when an entry leaves ``MessageFold``'s inline in-order case."""

    def take(self, entry: object) -> None:
        raise AssertionError(f"entry {entry} went through take")

    def feed(self, event: object) -> None:
        raise AssertionError(f"event {event} went through feed")


def test_messages_of_a_sequential_history_stay_on_the_inline_fast_path() -> None:
    records = _sequential()
    messages = [
        Message(topic="tl", partition=0, offset=i, key=b"t", value=value, timestamp=(1, i))
        for i, (value, _) in enumerate(_on_the_topic(records))
    ]
    replay = _InOrderOnly()
    fold = MessageFold(replay, "t", epoch_ms_codec())

    assert fold.fold(messages[:10]) == []
    assert fold.fold(messages[10:]) == []
    lean = replay.lean_fold
    assert isinstance(lean, LeanFold)
    assert all(type(s) is list for s in lean._instants.values())  # none left the fast path
    assert replay.next_seq == len(records)
    _assert_same(records, as_messages=True)


def test_messages_the_fast_path_does_not_take_are_read_as_the_history_reads_them() -> None:
    """Another table's message is skipped (keyed by it, or keyed by this table but about
    another), a corrupt one (truncated, trailing bytes) reported with its offset, a consumer
    error handed on, an event of another kind ignored; the entries around them are folded."""
    codec = default_codec()
    first, second = _on_the_topic(RACE[:2])
    theirs = {**RACE[2], "envelope": {**ENVELOPE, "table_id": "u", "event_id": "x"}}
    other_table = codec.encode("TimelineTransition", theirs)
    beat = codec.encode(
        "Heartbeat",
        {
            "envelope": {**ENVELOPE, "event_id": "h"},
            "instant": INSTANTS[0],
            "owner": "w",
            "seq": 0,
            "interval_ms": 500,
        },
    )
    errors: list[object] = []
    error = Message(topic="tl", partition=0, error=KafkaError(KafkaError._TRANSPORT))
    messages = [
        Message(topic="tl", partition=0, offset=0, key=b"t", value=first[0]),
        Message(topic="tl", partition=0, offset=1, key=b"t", value=second[0][:30]),
        Message(topic="tl", partition=0, offset=1, key=b"t", value=second[0] + b"\x00"),
        Message(topic="tl", partition=0, offset=2, key=b"u", value=other_table),
        Message(topic="tl", partition=0, offset=3, key=b"t", value=other_table),
        error,
        Message(topic="tl", partition=0, offset=4, key=b"t", value=beat),
        Message(topic="tl", partition=0, offset=5, key=b"t", value=second[0]),
    ]
    replay = TopicReplay()

    unreadable = MessageFold(replay, "t", epoch_ms_codec(), on_error=errors.append).fold(messages)

    assert [(u.offset, u.reason) for u in unreadable] == [(1, "corrupt_body")] * 2
    assert len(errors) == 1
    assert sorted(replay.entries) == [0, 1]
    assert sorted(replay.state().instants) == [INSTANTS[0], INSTANTS[1]]


def test_a_race_leaves_the_fast_path_and_is_rejected_as_a_conflict() -> None:
    state = _replayed(RACE).state()
    assert [r.seq for r in state.rejected] == [5]
    assert state.rejected[0].reason.startswith("OverlappingCommitConflict")
    _assert_same(RACE)


def test_fast_instants_share_their_fields_set_without_sharing_its_changes() -> None:
    """Fast instants of one step share one ``model_fields_set`` (a set per instant was a
    fifth of ``state()``); copying one with changes leaves the others' untouched."""
    state = _replayed(_sequential()).state()
    first, second = (state.instants[name] for name in INSTANTS[:2])
    assert list(first.__dict__) == list(InstantState.model_fields)  # every field, in order
    assert first.model_fields_set is second.model_fields_set
    before = set(second.model_fields_set)

    changed = [
        first.model_copy(update={"reason": "r"}),
        evolve(first, {"rollback_by": INSTANTS[2]}),
    ]

    assert second.model_fields_set == before == first.model_fields_set
    assert [c.model_fields_set - before for c in changed] == [{"reason"}, {"rollback_by"}]
