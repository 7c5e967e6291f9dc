"""The model test (issue 3, "Done means"): random interleavings of several writers over one
storage, checking the timeline's safety invariants after every step.

Three "processes" (each its own ``Timeline`` cache and its own ``EmbeddedCoordinator``, so the
lock excludes nothing between them) run ingestion writes and table-service plans on three
file groups, while hypothesis interleaves: races inside an append (another process's step
slipped in between a read of the tail and the write, forcing a rebase), lost replies after a
write took effect, writers that crash between steps, a cleaner that rolls pending writes back
(intent, rolled_back, completed; it may crash in between), cancel requests and aborts of
plans, and zombies that write an entry they validated long ago, unvalidated, at the new tail.

Invariants, judged by a fresh full replay (which must equal a checkpointed load and every
process's cached view):

1. no instant is both completed and aborted or rolled back;
2. no completed instant is lost: once seen completed (or acknowledged to its writer) it stays
   completed, and a writer that got a conflict never sees its instant complete;
3. no two overlapping instants both complete unless ordered (one completed before the other
   was requested);
4. an instant with a cancel request (or a rollback intent) never completes.
"""

from __future__ import annotations

import itertools
from typing import Any

from _hypothesis_profiles import examples
from _memstore import MemStorage
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from lakewarden.storage import AlreadyExistsError
from lakewarden.storage.faults import FaultyStorage
from lakewarden.table.checkpoint import entry_key
from lakewarden.table.conflicts import (
    Footprint,
    IngestionPrecedenceConflict,
    WriteConflictError,
)
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.instant import NO_WORKLOAD_ACTIONS, Action, Instant, Transition
from lakewarden.table.plans import ServicePlan
from lakewarden.table.state_machine import Replayer
from lakewarden.table.stats import CommitStats, FileGroupId, WorkloadProfile, WriteStat
from lakewarden.table.timeline import (
    EntryDraft,
    IllegalTransitionError,
    Timeline,
    TimelineEntry,
    TimelineState,
)
from lakewarden.table.transaction import WriteTransaction

GROUPS = "abc"
KINDS = {  # name: (action, cancellable)
    "commit": (Action.COMMIT, False),
    "deltacommit": (Action.DELTACOMMIT, False),
    "compaction": (Action.COMPACTION, False),
    "clustering-cancellable": (Action.CLUSTERING, True),
}
EXPECTED = (IllegalTransitionError, WriteConflictError)


def fg(name: str) -> FileGroupId:
    return FileGroupId(partition_path="", file_id=name)


def stats(tx: WriteTransaction, groups: str) -> CommitStats:
    return CommitStats(
        operation=tx.operation,
        write_stats=tuple(
            WriteStat(
                file_group=fg(g),
                path=f"{g}_{tx.instant}.parquet",
                base_instant=tx.instant,
                num_records=1,
                size_bytes=1,
            )
            for g in groups
        ),
    )


def draft(instant: str, action: Action, transition: Transition, payload: Any) -> EntryDraft:
    return EntryDraft(
        instant=instant,
        action=action,
        transition=transition,
        actor="model",
        lock_token=None,
        wall_time_ms=0,
        payload=payload,
    )


class Write:
    """One instant driven by the model: its transaction and the file groups it touches."""

    def __init__(self, tx: WriteTransaction, groups: str) -> None:
        self.tx = tx
        self.groups = groups


class TimelineModel(RuleBasedStateMachine):
    writes = Bundle("writes")

    @initialize()
    def setup(self) -> None:
        self.storage = MemStorage()  # zombies, rogues and the invariants use it directly
        self.faulty = FaultyStorage(self.storage)  # the processes go through it
        self.procs = [
            (Timeline(self.faulty, checkpoint_interval=7, table="t"), EmbeddedCoordinator())
            for _ in range(3)
        ]
        self.acked: set[str] = set()  # complete() returned to the writer
        self.conflicted: set[str] = set()  # complete() raised a named conflict
        self.seen_completed: set[str] = set()
        self.stashed: list[TimelineEntry] = []  # zombie entries, validated long ago

    # -- writers --------------------------------------------------------------------------------

    @rule(
        target=writes,
        proc=st.integers(0, 2),
        kind=st.sampled_from(sorted(KINDS)),
        groups=st.sets(st.sampled_from(GROUPS), min_size=1).map(lambda s: "".join(sorted(s))),
    )
    def begin(self, proc: int, kind: str, groups: str) -> Write:
        timeline, coord = self.procs[proc]
        action, cancellable = KINDS[kind]
        plan = None
        if action in (Action.COMPACTION, Action.CLUSTERING):
            plan = ServicePlan(file_groups=tuple(fg(g) for g in groups))
        tx = WriteTransaction.begin(
            timeline,
            coord,
            "t",
            operation=kind,
            actor=f"p{proc}",
            action=action,
            cancellable=cancellable,
            plan=plan,
        )
        return Write(tx, groups)

    @rule(write=writes, racer=st.none() | writes, lose_reply=st.booleans())
    def advance(self, write: Write, racer: Write | None, lose_reply: bool) -> None:
        """The writer's next step: inflight after requested, complete after inflight. A racer
        from another process may complete between our read of the tail and our write."""
        current = write.tx.status()
        if current is None or current.state is Transition.REQUESTED:
            self._inflight(write)
            return
        if racer is not None and racer.tx.coordinator is not write.tx.coordinator:
            self.faulty.before("write_if_absent", lambda: self._complete(racer))
        if lose_reply and racer is None:
            self.faulty.lose_reply("write_if_absent")
        self._complete(write)
        self.faulty.clear_faults()

    # The same step again: hypothesis picks rules uniformly, and lifecycles should get far.
    advance_more = advance

    def _inflight(self, write: Write) -> None:
        workload = WorkloadProfile(
            operation=write.tx.operation, file_groups=tuple(fg(g) for g in write.groups)
        )
        try:
            write.tx.inflight(workload)
        except WriteConflictError:  # RFC-79 step 2: beaten before it wrote anything
            self.conflicted.add(write.tx.instant)
        except IllegalTransitionError:
            pass  # cancelled or rolled back meanwhile

    def _complete(self, write: Write) -> None:
        try:
            write.tx.complete(stats(write.tx, write.groups))
        except IngestionPrecedenceConflict:
            # A pending ingestion is in the way: the plan requests its own cancellation, as
            # the executor's pre-commit does, and that is what makes the verdict final.
            try:
                self._cancel(write)
                self.conflicted.add(write.tx.instant)
            except IllegalTransitionError:
                pass
        except WriteConflictError:
            self.conflicted.add(write.tx.instant)
        except IllegalTransitionError:
            pass
        else:
            self.acked.add(write.tx.instant)

    # -- others acting on an instant ------------------------------------------------------------

    @rule(write=writes, proc=st.integers(0, 2), steps=st.integers(1, 3))
    def cleaner_rolls_back(self, write: Write, proc: int, steps: int) -> None:
        """Intent, rolled_back, then the rollback completes; may crash after any step. It does
        not ask liveness: a paused writer is indistinguishable from a dead one."""
        timeline = self.procs[proc][0]
        target = write.tx.instant
        try:
            entry, _ = timeline.append(
                lambda s: draft(
                    str(Instant.next_after(s.last_requested())),
                    Action.ROLLBACK,
                    Transition.REQUESTED,
                    {"operation": "rollback", "cancellable": False, "plan": {"target": target}},
                )
            )
            if steps >= 2:
                timeline.append(
                    draft(
                        target,
                        write.tx.action,
                        Transition.ROLLED_BACK,
                        {"reason": "heartbeat expired"},
                    )
                )
            if steps >= 3:
                timeline.append(
                    draft(
                        entry.instant,
                        Action.ROLLBACK,
                        Transition.COMPLETED,
                        CommitStats(operation="rollback").model_dump(mode="json"),
                    )
                )
        except IllegalTransitionError:
            pass

    def _cancel(self, write: Write) -> None:
        write.tx.timeline.append(
            draft(write.tx.instant, write.tx.action, Transition.CANCEL_REQUESTED, {"reason": "x"})
        )

    @rule(write=writes, proc=st.integers(0, 2), then_abort=st.booleans())
    def cancel(self, write: Write, proc: int, then_abort: bool) -> None:
        timeline = self.procs[proc][0]
        try:
            timeline.append(
                draft(
                    write.tx.instant,
                    write.tx.action,
                    Transition.CANCEL_REQUESTED,
                    {"reason": "model"},
                )
            )
            if then_abort:
                timeline.append(
                    draft(
                        write.tx.instant, write.tx.action, Transition.ABORTED, {"reason": "model"}
                    )
                )
        except IllegalTransitionError:
            pass

    # -- zombies --------------------------------------------------------------------------------

    @rule(write=writes, transition=st.sampled_from([Transition.COMPLETED, Transition.REQUESTED]))
    def zombie_validates(self, write: Write, transition: Transition) -> None:
        """A writer prepares an entry against the current tail, then pauses."""
        state = Timeline(self.storage).load()
        payload: Any = stats(write.tx, write.groups).model_dump(mode="json")
        if transition is Transition.REQUESTED:  # a fresh instant, valid right now
            instant = str(Instant.next_after(state.last_requested()))
            payload = {"operation": "zombie", "cancellable": False, "plan": None}
            self.stashed.append(
                draft(instant, Action.COMMIT, transition, payload).at(state.tail_seq + 1)
            )
        else:
            self.stashed.append(
                draft(write.tx.instant, write.tx.action, transition, payload).at(state.tail_seq + 1)
            )

    @rule(write=writes)
    def rogue_completes(self, write: Write) -> None:
        """A writer that never checks anything appends completed at the tail."""
        tail = Timeline(self.storage).load().tail_seq
        entry = draft(
            write.tx.instant,
            write.tx.action,
            Transition.COMPLETED,
            stats(write.tx, write.groups).model_dump(mode="json"),
        ).at(tail + 1)
        self.storage.write_if_absent(entry_key(entry.seq), entry.model_dump_json().encode())

    @rule(data=st.data(), at_new_tail=st.booleans())
    def zombie_writes(self, data: st.DataObject, at_new_tail: bool) -> None:
        """A paused writer wakes up and writes what it prepared: at its old seq (it loses the
        race if anyone moved on) or, skipping its checks, at the new tail."""
        if not self.stashed:
            return
        entry = self.stashed.pop(data.draw(st.integers(0, len(self.stashed) - 1)))
        if at_new_tail:
            entry = entry.model_copy(update={"seq": Timeline(self.storage).load().tail_seq + 1})
        try:
            self.storage.write_if_absent(entry_key(entry.seq), entry.model_dump_json().encode())
        except AlreadyExistsError:
            pass  # it lost the race: harmless

    # -- invariants -----------------------------------------------------------------------------

    @invariant()
    def views_agree(self) -> None:
        if not hasattr(self, "storage"):
            return
        full = Timeline(self.storage).load(full_replay=True)
        assert Timeline(self.storage, checkpoint_interval=7).load() == full
        for timeline, _ in self.procs:
            assert timeline.load() == full

    @invariant()
    def safety(self) -> None:
        if not hasattr(self, "storage"):
            return
        state, accepted = replay_with_history(self.storage)
        completed = {i.instant for i in state.completed()}
        for instant, transitions in accepted.items():
            ended_otherwise = {Transition.ABORTED, Transition.ROLLED_BACK} & set(transitions)
            assert not (Transition.COMPLETED in transitions and ended_otherwise), instant  # 1
            if Transition.CANCEL_REQUESTED in transitions:  # 4
                assert Transition.COMPLETED not in transitions, instant
        for inst in state.instants.values():  # 4: rollback intents
            if inst.rollback_by is not None:
                assert inst.state is not Transition.COMPLETED, inst.instant
        assert self.seen_completed <= completed  # 2
        assert self.acked <= completed
        assert not (self.conflicted & completed)
        self.seen_completed |= completed
        assert_no_unordered_overlap(state)  # 3


def replay_with_history(storage: MemStorage) -> tuple[TimelineState, dict[str, list[Transition]]]:
    """The state and, per instant, the transitions that were accepted, in log order."""
    replayer = Replayer(TimelineState())
    accepted: dict[str, list[Transition]] = {}
    for entry in Timeline(storage).entries():
        if replayer.feed(entry) is None:
            accepted.setdefault(entry.instant, []).append(entry.transition)
    return replayer.state(), accepted


def assert_no_unordered_overlap(state: TimelineState) -> None:
    done = [i for i in state.completed() if i.action not in NO_WORKLOAD_ACTIONS]
    for a, b in itertools.combinations(done, 2):
        if Footprint.of(a).overlap(Footprint.of(b)) is None:
            continue
        assert a.completed_seq is not None and b.completed_seq is not None
        ordered = a.completed_seq < b.requested_seq or b.completed_seq < a.requested_seq
        assert ordered, f"{a.instant} and {b.instant} overlap and both completed unordered"


TimelineModel.TestCase.settings = settings(
    max_examples=examples(60),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_timeline_model = TimelineModel.TestCase
