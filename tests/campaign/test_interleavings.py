"""Deterministic interleavings at every destructive step: the campaign's races, replayed in one
process call by call.

Each actor is a "process" without Kafka (its own embedded coordinator: no shared lock, no
shared heartbeats) whose storage is a ``FaultyStorage``. For every call number ``k`` of one
operation of actor A (``delete``: between the check that licensed it and the delete;
``write_if_absent``: a timeline append, a fence or a completion; ``read``), a fresh table is
built and actor B's whole step runs just before A's ``k``-th call reaches storage
(``FaultyStorage.before``). Claim marks count 1 ms, so B always finds A's claim expired and
fences it (the case a stalled or paused executor meets). After both: the rows are the table's
rows (clustering changes none), the plan has at most one outcome, every error is named, and a
reader's rows are a committed snapshot or a named error.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakewarden.api.table import Table
from lakewarden.errors import LakewardenError
from lakewarden.settings import HeartbeatSettings
from lakewarden.storage.faults import FaultyStorage
from lakewarden.table.clean.policy import CleanPolicy
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.testing import SimulatedCrash

SCHEMA = pa.schema([("key", pa.string()), ("part", pa.string()), ("ts", pa.int64())])
# A claim mark counts 1 ms: a rival finds it expired at once (a stalled executor's case).
INSTANT_EXPIRY = HeartbeatSettings(interval_s=0.001, tolerable_misses=1)
ALLOWED_READ_ERRORS = {"InstantCleanedError", "MissingDataFileError"}
# A fresh table per call number: about a minute and a half for the module on this machine.
pytestmark = pytest.mark.slow


def _rows(version: int, keys: range) -> pa.Table:
    return pa.Table.from_pylist(
        [{"key": f"k{k}", "part": f"p{k % 2}", "ts": version} for k in keys], schema=SCHEMA
    )


def _table(root: Path, *, plan: bool = True) -> tuple[str, list[dict[str, Any]]]:
    """A table with three slices per bucket and (``plan``) a cancellable clustering plan,
    which keeps its input files from the cleaner; its rows."""
    table = Table.create(
        str(root),
        name="t",
        record_key="key",
        schema=SCHEMA,
        partition_by=["part"],
        ordering_field="ts",
        buckets=2,
        coordinator=EmbeddedCoordinator(INSTANT_EXPIRY),
    )
    for version in (1, 2, 3):
        table.write(_rows(version, range(version * 3, version * 3 + 6)), "upsert")
    if plan:
        assert table.schedule_clustering(sort_by=["ts"], cancellable=True) is not None
    return str(root), _visible(table)


class _KilledBeforeCompleting(FaultyStorage):
    """A process killed just before it appends a ``completed`` entry (after its fence and
    its deletes): what it leaves is a fenced plan and no completion."""

    def write_if_absent(self, key: str, data: bytes) -> None:
        if key.startswith(".lakewarden/timeline/") and b'"transition":"completed"' in data:
            raise SimulatedCrash("killed before its completion")
        super().write_if_absent(key, data)


def _process(
    uri: str, actor: str, storage: type[FaultyStorage] = FaultyStorage
) -> tuple[Table, FaultyStorage]:
    """The table as another process opens it, on a storage whose calls can be interleaved."""
    plain = Table.open(uri, coordinator=EmbeddedCoordinator(INSTANT_EXPIRY))
    faulty = storage(plain.storage)
    return Table(faulty, plain.config, coordinator=plain.coordinator, actor=actor), faulty


def _visible(table: Table) -> list[dict[str, Any]]:
    return sorted(table.read(columns=["key", "ts"]).to_pylist(), key=lambda r: r["key"])


def _outcome(step: Callable[[], object]) -> str:
    """What a step was told: its result, or the name of a named error. A raw error fails."""
    try:
        return str(step())
    except LakewardenError as err:
        return type(err).__name__


def _recorded(told: dict[str, str], name: str, step: Callable[[], object]) -> Callable[[], None]:
    """An action that runs ``step`` and records what it was told under ``name``."""

    def action() -> None:
        try:
            told[name] = _outcome(step)
        except SimulatedCrash:
            told[name] = "killed"

    return action


def _calls(root: Path, op: str, run: Callable[[Table], object], *, plan: bool = True) -> int:
    """How many ``op`` calls ``run`` makes on an undisturbed table."""
    uri, _ = _table(root, plan=plan)
    table, faulty = _process(uri, "counter")
    run(table)
    return faulty.calls(op)  # type: ignore[arg-type]


def _plan(table: Table) -> str:
    return next(i.instant for i in table.state().pending() if i.action == "clustering")


def _check(uri: str, rows: list[dict[str, Any]], plan: str | None) -> None:
    """The rows are the table's, and the plan ended at most once (rejected entries aside)."""
    table = Table.open(uri, coordinator=EmbeddedCoordinator(INSTANT_EXPIRY))
    assert _visible(table) == rows  # nothing lost, nothing duplicated
    rejected = {r.seq for r in table.state().rejected}
    ends = [
        e.transition
        for e in table.timeline_log.entries()
        if e.instant == plan and e.seq not in rejected and e.transition in ("completed", "aborted")
    ]
    assert len(ends) <= 1, f"plan {plan} ended twice: {ends}"


def _run(table: Table, plan: str | None = None) -> object:
    return table.run_table_service(plan or _plan(table)).outcome


@pytest.mark.parametrize("b_completes", [True, False], ids=["b-completes", "b-killed"])
@pytest.mark.parametrize("op", ["write_if_absent", "delete"])
def test_a_rival_executor_at_every_step_of_a_plan_run(
    tmp_path: Path, op: str, b_completes: bool
) -> None:
    """Executor B runs the plan just before each ``op`` call of executor A's run (A's
    fence, its files, its completion; its deletes of earlier attempts): one of them
    completes it, the other is fenced or refused, and the rows stay. With ``b-killed`` B
    dies just before its own completion, after fencing A and deleting A's files: A's
    completion must then be refused (the fence), or the plan would name deleted files."""
    total = _calls(tmp_path / "count", op, _run)
    assert total > 0
    for k in range(1, total + 1):
        uri, rows = _table(tmp_path / f"{op}-{k}")
        a, faulty = _process(uri, "executor-a")
        b, _ = _process(
            uri, "executor-b", FaultyStorage if b_completes else _KilledBeforeCompleting
        )
        plan = _plan(a)
        told: dict[str, str] = {}
        faulty.before(op, _recorded(told, "b", partial(_run, b, plan)), nth=k)  # type: ignore[arg-type]
        told["a"] = _outcome(partial(_run, a, plan))
        assert list(told.values()).count("completed") <= 1, (k, told)
        _check(uri, rows, plan)


@pytest.mark.parametrize("op", ["write_if_absent", "delete"])
def test_a_cancel_at_every_step_of_a_plan_run(tmp_path: Path, op: str) -> None:
    """Another process requests and executes the cancellation just before each ``op`` call
    of the executor's run: the plan ends completed or aborted, never both, and the rows
    stay."""
    total = _calls(tmp_path / "count", op, _run)
    for k in range(1, total + 1):
        uri, rows = _table(tmp_path / f"{op}-{k}")
        a, faulty = _process(uri, "executor-a")
        x, _ = _process(uri, "canceller-x")
        plan = _plan(a)

        def cancel(x: Table = x, plan: str = plan) -> None:
            _outcome(lambda: x.request_cancel(plan, reason="interleaving"))
            _outcome(lambda: x.execute_cancel(plan))

        faulty.before(op, cancel, nth=k)  # type: ignore[arg-type]
        _outcome(partial(_run, a, plan))
        _check(uri, rows, plan)


def _clean(table: Table) -> object:
    return table.clean(CleanPolicy(commits_retained=1, retention_window_s=0.0)).instant


def test_two_cleaners_at_every_delete(tmp_path: Path) -> None:
    """Cleaner B runs a whole clean just before each delete of cleaner A's: both succeed
    (one may find its work done), and the rows stay."""
    total = _calls(tmp_path / "count", "delete", _clean, plan=False)
    assert total > 0
    for k in range(1, total + 1):
        uri, rows = _table(tmp_path / f"clean-{k}", plan=False)
        a, faulty = _process(uri, "cleaner-a")
        b, _ = _process(uri, "cleaner-b")
        told: dict[str, str] = {}
        faulty.before("delete", _recorded(told, "b", partial(_clean, b)), nth=k)
        told["a"] = _outcome(partial(_clean, a))
        assert "IllegalTransitionError" not in told.values(), told
        _check(uri, rows, None)


@pytest.mark.parametrize("op", ["read", "list", "local_path"])
def test_a_reader_at_every_call_during_a_write_and_a_clean(tmp_path: Path, op: str) -> None:
    """A write and a clean (keeping one commit, no retention window) land just before each
    storage call of a reader (``read``, ``list``: its timeline; ``local_path``: a data file it
    is about to open): it returns the snapshot before the write or after it, or a named
    error; never a mix, never a raw error."""
    # Counted with the very read the loop makes (one ``local_path`` per data file it opens).
    total = _calls(tmp_path / "count", op, lambda t: t.read(columns=["key", "ts"]), plan=False)
    assert total > 0
    cut_off = 0
    for k in range(1, total + 1):
        uri, before = _table(tmp_path / f"read-{k}", plan=False)
        reader, faulty = _process(uri, "reader")
        other, _ = _process(uri, "writer-cleaner")

        def overtake(other: Table = other) -> None:
            other.write(_rows(4, range(0, 20)), "upsert")  # every key superseded
            _clean(other)

        faulty.before(op, overtake, nth=k)  # type: ignore[arg-type]
        try:
            seen = sorted(reader.read(columns=["key", "ts"]).to_pylist(), key=lambda r: r["key"])
        except LakewardenError as err:
            assert type(err).__name__ in ALLOWED_READ_ERRORS, err
            cut_off += 1
            continue
        finally:
            assert faulty.pending(op) == 0, f"read {k}: the overtake never ran"  # type: ignore[arg-type]
        after = _visible(Table.open(uri, coordinator=EmbeddedCoordinator()))
        assert seen in (before, after), f"read {k}: neither snapshot"
        assert after != before


def test_an_executor_whose_inputs_a_clean_removed_after_a_rival_completed_is_told_so(
    tmp_path: Path,
) -> None:
    """Campaign seed 32 (embedded, 6 s): executor A, fenced by executor B, was still reading
    the plan's input files when B completed the plan and a clean removed the inputs it had
    superseded; A got pyarrow's raw ``FileNotFoundError``. Before each data file A opens
    (``local_path``), B completes the plan and a clean runs: A is told by a named error
    (``InstantAlreadyCompletedError``, or its stage's error when the file was opened inside a
    job's task), and the rows stay."""
    total = _calls(tmp_path / "count", "local_path", _run)
    assert total > 0
    for k in range(1, total + 1):
        uri, rows = _table(tmp_path / f"inputs-{k}")
        a, faulty = _process(uri, "executor-a")
        b, _ = _process(uri, "executor-b")
        plan = _plan(a)

        def overtake(b: Table = b, plan: str = plan) -> None:
            assert _outcome(partial(_run, b, plan)) == "completed"
            _clean(b)

        faulty.before("local_path", overtake, nth=k)  # type: ignore[arg-type]
        told = _outcome(partial(_run, a, plan))  # a raw error fails the test here
        assert faulty.pending("local_path") == 0, f"{k}: the overtake never ran"
        assert told != "completed", k
        _check(uri, rows, plan)
