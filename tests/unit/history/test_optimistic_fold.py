"""The optimistic fold (``MessageFold(optimistic=True)``) with its second process's verdict
decides exactly what the fold that validates in process decides.

``lakewarden replay`` folds the ``inflight`` and ``completed`` payloads of a large read as
valid and has a second process (``lakewarden.history._validate``) check them; when that
process finds one invalid, the read is made again validating in process. So two things must
hold on any history: when the verdict finds every text valid, the optimistic fold's state,
entries, conflicts and summary are the reference's (the state machine over validated
entries); and when some payload the fold took as valid is not, the verdict says so. The
histories are the lean fold's generated ones (``test_lean_fold``), whose payload pools hold
malformed payloads, texts that are no JSON object and texts JSON parsers read differently.
"""

from __future__ import annotations

import io
import json
import pickle
from collections import Counter
from typing import Any

import pytest
from _hypothesis_profiles import examples
from confluent_kafka import Message
from hypothesis import example, given, settings
from test_lean_fold import (
    COMPLETED,
    INFLIGHT,
    ODD_FIELDS,
    PLAN_REQUESTED,
    RACE,
    REQUESTED,
    _assert_same,
    _on_the_topic,
    _reference,
    _sequential,
    histories,
)

from lakewarden.events.codec import epoch_ms_codec
from lakewarden.history import TopicReplay
from lakewarden.history._lean_fold import (
    PAYLOAD_MODEL,
    PAYLOAD_TEXT,
    TRANSITION,
    UNCHECKED,
    is_lean,
)
from lakewarden.history._message_fold import MessageFold
from lakewarden.history._validate import (
    PLAIN_REQUESTED,
    PayloadChecker,
    fast_requested,
    frame,
    plain_ingestion,
    serve,
)
from lakewarden.table.plans import JobPlan, UntypedPlan
from lakewarden.table.stats import CommitStats, WorkloadProfile
from lakewarden.table.timeline_state import RequestedPayload

_MODELS = {"requested": RequestedPayload, "inflight": WorkloadProfile, "completed": CommitStats}


def _optimistic(records: list[dict[str, Any]]) -> tuple[TopicReplay, list[tuple[str, int]]]:
    """``MessageFold(optimistic=True)`` over the messages of ``records`` (three to a batch),
    each batch's unchecked texts framed as ``PayloadChecker.send`` frames them, and the
    child's code (``serve``) run over them in process: the replay and the invalid texts."""
    messages = [
        Message(topic="tl", partition=0, offset=i, key=b"t", value=value, timestamp=(1, i))
        for i, (value, _) in enumerate(_on_the_topic(records))
    ]
    replay = TopicReplay()
    fold = MessageFold(replay, "t", epoch_ms_codec(), optimistic=True)
    frames = io.BytesIO()
    for i in range(0, len(messages), 3):
        fold.fold(messages[i : i + 3])
        frames.write(frame(*fold.unchecked()))
    frames.seek(0)
    answer = io.BytesIO()
    serve(frames, answer)
    invalid, _, _ = pickle.loads(answer.getvalue())
    return replay, invalid


def _invalid_fast_payload(replay: TopicReplay) -> bool:
    """Whether an entry the fold took unchecked holds a payload its model refuses."""
    for entry in replay.entries.raw.values():
        if is_lean(entry) and entry[PAYLOAD_MODEL] is UNCHECKED:
            try:
                _MODELS[entry[TRANSITION].value].model_validate_json(entry[PAYLOAD_TEXT])
            except ValueError:
                return True
    return False


def _assert_optimistic_same(records: list[dict[str, Any]]) -> bool:
    """The optimistic fold agrees with the reference when its verdict is clean, and its
    verdict is not clean when a payload it took unchecked is invalid (then the read starts
    over validating in process: ``test_lean_fold``'s ``as_messages`` path; a redelivered
    entry's invalid text also makes it start over, which costs a read and changes nothing).
    Whether the verdict was clean."""
    replay, invalid = _optimistic(records)
    if _invalid_fast_payload(replay):
        assert invalid
    if invalid:
        return False
    topic = [record for _, record in _on_the_topic(records) if record is not None]
    entries, reference = _reference(topic)
    summary = replay.summary()
    state = replay.state()
    assert dict(replay.entries) == entries
    assert state.instants == reference.instants
    assert (state.tail_seq, state.last_requested_time) == (
        reference.tail_seq,
        reference.last_requested_time,
    )
    assert [(r.seq, r.reason) for r in state.rejected] == list(reference.rejected)
    for name, instant in state.instants.items():
        assert instant.model_fields_set == reference.instants[name].model_fields_set, name
    assert summary.states == Counter(i.state.value for i in reference.instants.values())
    assert summary.rejected == state.rejected and summary.tail_seq == reference.tail_seq
    return True


@settings(max_examples=examples(100))
@given(histories())
@example(RACE)
def test_the_optimistic_fold_decides_what_the_state_machine_decides(
    records: list[dict[str, Any]],
) -> None:
    _assert_optimistic_same(records)


def test_a_sequential_history_folds_optimistically_with_a_clean_verdict() -> None:
    assert _assert_optimistic_same(_sequential())


def _fast_requested_text(payload: object) -> str | None:
    """``payload`` validated and written as ``TimelinePublisher`` writes it, when that text
    is laid out as a plain ingestion's and the fast requested step takes its model; else
    None."""
    try:
        model = RequestedPayload.model_validate(payload)
    except ValueError:
        return None
    text = json.dumps(model.model_dump(mode="json"), sort_keys=True)
    return text if plain_ingestion(text) and fast_requested(model) else None


def test_requested_payloads_as_published_are_folded_unread_and_built_when_read() -> None:
    """Requested payloads as an ingestion publishes them (``sort_keys``; no plan, a job plan
    with and without a micro-batch) stay on the fast path unread, and the states built when
    read hold the operations and plans the state machine's hold."""
    plain = [t for t in map(_fast_requested_text, REQUESTED) if t is not None]
    assert len(plain) >= 3
    records = _sequential()
    for i, record in enumerate(records[::3]):
        record["payload"] = plain[i % len(plain)]
    replay, invalid = _optimistic(records)
    fold = replay.lean_fold
    assert invalid == [] and fold is not None
    assert all(type(s) is list for s in fold._instants.values())  # all on the fast path
    assert all(is_lean(s[6]) for s in fold._instants.values())  # none read yet
    assert _assert_optimistic_same(records)
    built = replay.state().instants.values()
    assert any(isinstance(i.plan, JobPlan) for i in built)
    assert {i.operation for i in built} == {"insert", "upsert"}


# Invalid payloads at the fast steps (first, middle, last instant; a rejection, a text that
# is no JSON object, a text only json.loads reads): the verdict names each, by where it
# was sent, and the in-process fold the read falls back to is the reference's.
_BAD_TEXTS = [
    json.dumps(INFLIGHT[-1]),  # malformed WorkloadProfile: a rejection
    json.dumps(COMPLETED[-1]),  # malformed CommitStats
    "[1, 2]",  # no JSON object: makes no entry
    "not json",
    ODD_FIELDS[-2]["payload"],  # NaN: json.loads reads it, pydantic does not
]


@pytest.mark.parametrize("bad", range(len(_BAD_TEXTS)))
@pytest.mark.parametrize("at", [1, 2, 10, 11, 22, 23])  # inflight / completed of 3 instants
def test_an_invalid_payload_anywhere_is_in_the_verdict(bad: int, at: int) -> None:
    records = _sequential()
    records[at] = {**records[at], "payload": _BAD_TEXTS[bad]}

    _, invalid = _optimistic(records)

    transition = records[at]["transition"]
    try:
        _MODELS[transition].model_validate_json(_BAD_TEXTS[bad])
        expected = []  # NaN in an extra field: WorkloadProfile ignores it
    except ValueError:
        expected = [(transition, at // 3)]  # each instant sends one text of each
    assert invalid == expected
    _assert_optimistic_same(records)  # clean or not: what the optimistic read ends with
    _assert_same(records, as_messages=True)  # what the read then folds, validating here


def test_the_checker_process_judges_what_it_is_sent() -> None:
    """The real child: texts over several batches, valid and not, repeated and not."""
    checker = PayloadChecker.start()
    assert checker is not None
    good_i, good_c = json.dumps(INFLIGHT[0]), json.dumps(COMPLETED[0])
    good_r = json.dumps({"operation": "insert", "plan": {"kind": "job", "job_id": "j"}})
    checker.send([good_r], [good_i, json.dumps(INFLIGHT[-1])], [good_c])
    checker.send([], [], [])
    checker.send(
        [good_r, '{"operation": ""}'], [good_i] * 3,
        [good_c, "[1]", good_c, json.dumps(COMPLETED[-1])],
    )  # fmt: skip

    verdict = checker.verdict()

    assert verdict is not None
    assert verdict.invalid == (
        ("inflight", 1), ("requested", 2), ("completed", 2), ("completed", 4)
    )  # fmt: skip
    assert verdict.texts == 1 + 2 + 1 + 2 + 3 + 4
    assert verdict.cpu_s > 0
    assert not verdict.all_valid


def test_a_checker_whose_process_died_gives_no_verdict() -> None:
    """No verdict: the read then starts over validating in process, never trusts the fold."""
    checker = PayloadChecker.start()
    assert checker is not None
    checker._process.kill()
    checker._process.wait()
    checker.send([], [json.dumps(INFLIGHT[0])] * 10_000, [])

    assert checker.verdict() is None


def test_the_child_judges_alike_while_it_stops_remembering_texts_that_never_repeat() -> None:
    """After a cache's worth of texts without a hit the child stops looking texts up for a
    while, then remembers again: every verdict is the same either way."""
    from lakewarden.history._validate import _PAUSE, _REMEMBERED

    count = _REMEMBERED + _PAUSE + 3 * _REMEMBERED
    texts = [json.dumps({"operation": f"op-{i}", "file_groups": []}) for i in range(count)]
    bad = {5, _REMEMBERED + 7, _REMEMBERED + _PAUSE - 1, _REMEMBERED + _PAUSE + 5}
    for i in bad:
        texts[i] = json.dumps(INFLIGHT[-1])
    texts[-_REMEMBERED:] = [texts[0]] * _REMEMBERED  # repeated again at the end
    frames = io.BytesIO(b"".join(frame([], texts[i : i + 9999], []) for i in range(0, count, 9999)))
    answer = io.BytesIO()

    serve(frames, answer)

    invalid, judged, _ = pickle.loads(answer.getvalue())
    assert judged == count
    assert invalid == [("inflight", i) for i in sorted(bad)]


def test_no_checker_when_no_process_can_be_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """``replay_timeline`` then validates in process (``optimistic`` off)."""
    from lakewarden.history import _validate

    def refused(*args: object, **kwargs: object) -> object:
        raise OSError("no more processes")

    monkeypatch.setattr(_validate.subprocess, "Popen", refused)

    assert PayloadChecker.start() is None


# Valid requested payloads laid out as a plain ingestion's that are not on the fast path (a
# key given twice: the last one wins): the fold takes each unread, so the checker must fail
# the read.
_NOT_FAST_BUT_PLAIN = [
    '{"cancellable": false, "operation": "insert", "plan": {"batch": null, "kind": "job"}, '
    '"cancellable": true}',
    '{"cancellable": false, "operation": "insert", "plan": {"batch": null, "kind": "job"}, '
    '"plan": {"kind": "rollback", "target": "20230101000000000"}}',
]


@pytest.mark.parametrize("text", _NOT_FAST_BUT_PLAIN)
def test_a_plain_looking_requested_payload_that_is_not_fast_fails_the_read(text: str) -> None:
    model = RequestedPayload.model_validate_json(text)  # valid: only not a fast one
    assert plain_ingestion(text) and not fast_requested(model)
    records = _sequential()
    records[9] = {**records[9], "payload": text}  # the 4th instant's requested entry

    _, invalid = _optimistic(records)

    assert invalid == [("requested", 3)]
    assert not _assert_optimistic_same(records)  # the read starts over in process
    _assert_same(records, as_messages=True)  # which decides what the state machine decides


@pytest.mark.parametrize(
    ("action", "payload"),
    [
        ("clustering", PLAN_REQUESTED[1]),
        ("compaction", PLAN_REQUESTED[2]),
        ("clean", {"operation": "clean", "plan": {"kind": "clean", "files": []}}),
        ("rollback", {"operation": "rollback", "plan": {"target": "20230101000000000"}}),
    ],
)
def test_a_table_services_plan_as_published_keeps_the_verdict_clean(
    action: str, payload: dict[str, Any]
) -> None:
    """Not cancellable, a table service's plan begins as a plain ingestion's payload does;
    it is not laid out as one, so it is read as any other text and costs no second read."""
    text = json.dumps(
        RequestedPayload.model_validate(payload).model_dump(mode="json"), sort_keys=True
    )
    assert text.startswith(PLAIN_REQUESTED) and not plain_ingestion(text)
    records = _sequential()
    for record in records[9:12]:  # the 4th instant, a table service's now
        record["action"] = action
    records[9] = {**records[9], "payload": text}

    _, invalid = _optimistic(records)

    assert invalid == []
    assert _assert_optimistic_same(records)


def test_a_key_given_twice_is_read_as_the_model_reads_it() -> None:
    """The fold reads no fact of a text it took unread: the operation and plan of the state
    are the validated model's (the last of a key given twice), and the verdict is clean."""
    records = _sequential()
    records[9] = {
        **records[9],
        "payload": '{"cancellable": false, "operation": "insert", "plan": {"batch": null}, '
        '"operation": "upsert", "plan": {"kind": "job", "job_id": "j"}}',
    }
    assert plain_ingestion(records[9]["payload"])
    replay, invalid = _optimistic(records)
    assert invalid == [] and replay.lean_fold is not None
    assert is_lean(replay.lean_fold._instants[records[9]["instant"]][6])  # taken unread
    assert _assert_optimistic_same(records)
    state = replay.state().instants[records[9]["instant"]]
    assert state.operation == "upsert" and isinstance(state.plan, JobPlan)


@pytest.mark.parametrize("payload", REQUESTED + PLAN_REQUESTED)
def test_fast_requested_is_the_state_machines_rule(payload: object) -> None:
    """``fast_requested`` on a valid model: not cancellable, and no plan, a job plan or an
    untyped one."""
    text = json.dumps(payload)
    try:
        model = RequestedPayload.model_validate_json(text)
    except ValueError:
        return
    expected = not model.cancellable and type(model.plan) in (type(None), JobPlan, UntypedPlan)
    assert fast_requested(model) is expected
