"""The campaign's checkers catch each violation they name (a checker that cannot fail proves
nothing), and pass a history that is consistent with its table."""

from __future__ import annotations

from typing import Any

import pytest
from _checkers import Op, TableObservation, check_run, ops_from_history


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
