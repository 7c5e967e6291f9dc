"""Named conflict rules: a scenario table, the errors' attributes and messages, and the state
machine ignoring a completion that skipped the check."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from _memstore import MemStorage

from lakewarden.errors import NonRetryableError
from lakewarden.table.checkpoint import entry_key
from lakewarden.table.conflicts import (
    Footprint,
    OverlappingCommitConflict,
    PendingPlanConflict,
    WriteConflictError,
    cancellable_plans_in_the_way,
    check_completion,
)
from lakewarden.table.instant import Action, Instant, Transition
from lakewarden.table.stats import CommitStats, FileGroupId, WorkloadProfile, WriteStat
from lakewarden.table.timeline import EntryDraft, Timeline, TimelineState


def fg(name: str) -> FileGroupId:
    return FileGroupId(partition_path="day=1", file_id=name)


class Log:
    """A timeline driven by scenario steps; instants are named by letters."""

    def __init__(self) -> None:
        self.storage = MemStorage()
        self.timeline = Timeline(self.storage, table="orders")
        self.names: dict[str, str] = {}

    def _append(self, name: str, action: Action, transition: Transition, payload: dict) -> None:
        def build(state: TimelineState) -> EntryDraft:
            if transition is Transition.REQUESTED:
                self.names[name] = str(Instant.next_after(state.last_requested()))
            return EntryDraft(
                instant=self.names[name],
                action=action,
                transition=transition,
                actor=name,
                lock_token=None,
                wall_time_ms=0,
                payload=payload,
            )

        def rules(state: TimelineState, draft: EntryDraft) -> None:
            current = state.get(draft.instant)
            if transition is Transition.COMPLETED and current is not None:
                check_completion(
                    state, current, CommitStats.model_validate(payload), table="orders"
                )

        self.timeline.append(build, validate=rules)

    def request(self, name: str, action: Action, fgs: str, *, cancellable: bool) -> None:
        plan = None
        if action in (Action.COMPACTION, Action.CLUSTERING):
            plan = {"file_groups": [fg(f).model_dump() for f in fgs]}
        payload = {"operation": action.value, "cancellable": cancellable, "plan": plan}
        self._append(name, action, Transition.REQUESTED, payload)

    def inflight(self, name: str, action: Action, fgs: str) -> None:
        replaces_all = fgs == "*"
        workload = WorkloadProfile(
            operation="overwrite" if replaces_all else action.value,
            file_groups=() if replaces_all else tuple(fg(f) for f in fgs),
            replaces_all=replaces_all,
        )
        self._append(name, action, Transition.INFLIGHT, workload.model_dump(mode="json"))

    def complete(self, name: str, action: Action, written: str, replaced: str = "") -> None:
        stats = CommitStats(
            operation=action.value,
            write_stats=tuple(
                WriteStat(
                    file_group=fg(f),
                    path=f"day=1/{f}",
                    base_instant=self.names[name],
                    num_records=1,
                    size_bytes=1,
                )
                for f in written
            ),
            replaced_file_groups=tuple(fg(f) for f in replaced),
        )
        self._append(name, action, Transition.COMPLETED, stats.model_dump(mode="json"))


@dataclass(frozen=True)
class Step:
    """``verb`` is req, infl or done; ``fgs`` the file groups (letters; "*" = everything)."""

    verb: str
    name: str
    action: Action = Action.COMMIT
    fgs: str = ""
    replaced: str = ""
    cancellable: bool = False


C, DC, CP, CL, CN = (
    Action.COMMIT,
    Action.DELTACOMMIT,
    Action.COMPACTION,
    Action.CLUSTERING,
    Action.CLEAN,
)


def lifecycle(name: str, action: Action, fgs: str, *, cancellable: bool = False) -> list[Step]:
    return [
        Step("req", name, action, fgs, cancellable=cancellable),
        Step("infl", name, action, fgs),
        Step("done", name, action, "" if fgs == "*" else fgs),
    ]


# (id, steps, expected outcome of the LAST step: None or (error, other instant, file group))
SCENARIOS = [
    (
        "overlap",
        [
            Step("req", "I"),
            Step("req", "J"),
            *lifecycle("I", C, "a")[1:],
            Step("infl", "J", C, "ab"),
            Step("done", "J", C, "ab"),
        ],
        (OverlappingCommitConflict, "I", "day=1/a"),
    ),
    (
        "disjoint",
        [
            Step("req", "I"),
            Step("req", "J"),
            *lifecycle("I", C, "a")[1:],
            Step("infl", "J", C, "b"),
            Step("done", "J", C, "b"),
        ],
        None,
    ),
    ("ordered", [*lifecycle("I", C, "a"), *lifecycle("J", C, "a")], None),
    (
        "write-stats-count",
        [
            Step("req", "I"),
            Step("req", "J"),
            Step("infl", "I", C, ""),
            Step("done", "I", C, "c"),
            Step("infl", "J", C, ""),
            Step("done", "J", C, "c"),
        ],
        (OverlappingCommitConflict, "I", "day=1/c"),
    ),
    (
        "replaced-count",
        [
            Step("req", "I"),
            Step("req", "J"),
            Step("infl", "I", C, ""),
            Step("done", "I", C, "", replaced="d"),
            Step("infl", "J", C, "d"),
            Step("done", "J", C, "d"),
        ],
        (OverlappingCommitConflict, "I", "day=1/d"),
    ),
    (
        "overwrite-touches-all",
        [
            Step("req", "I"),
            Step("req", "J"),
            *lifecycle("I", C, "*")[1:],
            Step("infl", "J", C, "z"),
            Step("done", "J", C, "z"),
        ],
        (OverlappingCommitConflict, "I", "*"),
    ),
    (
        "pending-plan-blocks-ingestion",
        [*lifecycle("P", CP, "a")[:2], *lifecycle("I", C, "ab")],
        (PendingPlanConflict, "P", "day=1/a"),
    ),
    ("pending-plan-elsewhere", [*lifecycle("P", CL, "a")[:2], *lifecycle("I", DC, "b")], None),
    (
        "ingestion-beats-cancellable-plan",
        [*lifecycle("P", CL, "a", cancellable=True)[:2], *lifecycle("I", C, "a")],
        None,
    ),
    (
        "cancellable-plan-loses-after",
        [
            *lifecycle("P", CL, "a", cancellable=True)[:2],
            *lifecycle("I", C, "a"),
            Step("done", "P", CL, "a"),
        ],
        (OverlappingCommitConflict, "I", "day=1/a"),
    ),
    (
        "completed-plan-beats-earlier-ingestion",
        [
            Step("req", "I"),
            *lifecycle("P", CP, "a"),
            Step("infl", "I", C, "a"),
            Step("done", "I", C, "a"),
        ],
        (OverlappingCommitConflict, "P", "day=1/a"),
    ),
    (
        "overlapping-plans-first-wins",
        [
            *lifecycle("P", CP, "a")[:2],
            *lifecycle("Q", CL, "a")[:2],
            Step("done", "Q", CL, "a"),
            Step("done", "P", CP, "a"),
        ],
        (OverlappingCommitConflict, "Q", "day=1/a"),
    ),
    (
        "clean-never-conflicts",
        [
            Step("req", "I"),
            Step("req", "K", CN),
            *lifecycle("I", C, "a")[1:],
            Step("done", "K", CN, "a"),
        ],
        None,
    ),
]


def run(log: Log, steps: list[Step]) -> None:
    for step in steps:
        if step.verb == "req":
            log.request(step.name, step.action, step.fgs, cancellable=step.cancellable)
        elif step.verb == "infl":
            log.inflight(step.name, step.action, step.fgs)
        else:
            log.complete(step.name, step.action, step.fgs, step.replaced)


@pytest.mark.parametrize(("steps", "expected"), [pytest.param(s, e, id=i) for i, s, e in SCENARIOS])
def test_conflict_scenarios(
    steps: list[Step], expected: tuple[type[WriteConflictError], str, str] | None
) -> None:
    log = Log()
    run(log, steps[:-1])
    last = steps[-1]
    if expected is None:
        run(log, [last])
        current = log.timeline.load().get(log.names[last.name])
        assert current is not None and current.state is Transition.COMPLETED
        return
    error, other, file_group = expected
    with pytest.raises(error) as info:
        run(log, [last])
    err = info.value
    ours, theirs = log.names[last.name], log.names[other]
    assert type(err) is error and isinstance(err, NonRetryableError)
    assert (err.table, err.instant, err.other_instant, err.file_group) == (
        "orders",
        ours,
        theirs,
        file_group,
    )
    message = str(err)
    assert message.startswith("Table orders: ")
    assert ours in message and theirs in message and f"file group {file_group}" in message
    assert "Help: " in message and message.endswith(".")
    # the instant stays pending: its writer cleans up and rolls back
    current = log.timeline.load().get(ours)
    assert current is not None and current.is_pending


def test_a_completion_that_skipped_the_check_is_ignored_by_readers() -> None:
    log = Log()
    run(
        log,
        [
            Step("req", "I"),
            Step("req", "J"),
            *lifecycle("I", C, "a")[1:],
            Step("infl", "J", C, "a"),
        ],
    )
    state = log.timeline.load()
    zombie = EntryDraft(
        instant=log.names["J"],
        action=C,
        transition=Transition.COMPLETED,
        actor="zombie",
        lock_token=1,
        wall_time_ms=0,
        payload=CommitStats(operation="upsert").model_dump(mode="json"),
    ).at(state.tail_seq + 1)
    log.storage.write_if_absent(entry_key(zombie.seq), zombie.model_dump_json().encode())
    after = Timeline(log.storage).load()
    current = after.get(log.names["J"])
    assert current is not None and current.state is Transition.INFLIGHT
    assert after.rejected[-1].reason.startswith("OverlappingCommitConflict: instant")
    assert log.names["I"] in after.rejected[-1].reason


def test_cancellable_plans_in_the_way_is_the_precedence_hook() -> None:
    log = Log()
    run(
        log,
        [
            *lifecycle("P", CL, "a", cancellable=True)[:2],
            *lifecycle("Q", CP, "b")[:1],
            *lifecycle("I", C, "ab")[:2],
        ],
    )
    state = log.timeline.load()
    ingestion = state.get(log.names["I"])
    assert ingestion is not None
    assert [p.instant for p in cancellable_plans_in_the_way(state, ingestion)] == [log.names["P"]]


def test_footprint_overlap() -> None:
    a, b = fg("a"), fg("b")
    assert Footprint(False, frozenset({a, b})).overlap(Footprint(False, frozenset({b}))) == str(b)
    assert Footprint(False, frozenset({a})).overlap(Footprint(False, frozenset({b}))) is None
    assert Footprint(True, frozenset()).overlap(Footprint(False, frozenset({b}))) == "*"
    assert Footprint(True, frozenset()).overlap(Footprint(False, frozenset())) is None
    assert Footprint(True, frozenset()).overlap(Footprint(True, frozenset())) == "*"
