"""The one state machine that decides which timeline entries are legal.

``apply(state, entry)`` returns the new ``TimelineState`` or ``Rejected(reason)``. It is pure.
Writers run it before appending; every reader replays it, and an entry that is illegal against
its prefix is ignored (its seq is consumed, nothing else changes) and reported in
``state.rejected``. ``judge`` is the rule itself (one entry against a ``StateView``);
``Replayer`` folds many entries with indexes instead of copying the state per entry.
Whoever folds, the rules below are the only ones: they read payloads through a
``PayloadParser`` (a writer validates each; replay shares one validation between equal
payloads: ``_payloads.SharedPayloads``) and build instant states from already valid values
without re-validating (``_frozen.construct`` / ``evolve``, sharing unchanged values).

Rules (``absent`` = no entry for the instant yet; ingestion = commit, deltacommit; plans =
compaction, clustering):

- every entry: well-formed payload for its transition; the action matches the instant's.
- requested: the instant is absent and its time is strictly greater than every earlier
  requested instant. ``cancellable`` only for plans. The plan's kind fits the action
  (``lakewarden.table.plans``): ingestion a job plan or none, clean a clean plan or none. A
  compaction or clustering names its file groups (``ServicePlan``). A rollback names a pending
  ingestion instant (``RollbackPlan``) that has no rollback yet; appending it is the rollback
  *intent*: the target can then only be rolled back (no inflight, no completed).
- inflight: only from requested (for every action).
- completed: from inflight; clean and rollback (no workload phase) also from requested.
  Never for a cancel-requested instant (invariant 3) or one with a rollback intent. A
  rollback completes only after its target's rolled_back entry. The conflict rules of
  ``lakewarden.table.conflicts`` must find nothing. The completed state keeps the write
  statistics and drops the workload profile (unless it ``replaces_all``).
- cancel_requested: only for a pending (requested or inflight) plan scheduled cancellable;
  never after completed. Irrevocable: the instant can then only be aborted.
- aborted: only from cancel_requested (RFC-79: a cancelled plan ends aborted).
- rolled_back: only for ingestion, from requested or inflight. Plans are never rolled back:
  a non-cancellable plan is executed to completion (its partial files are cleaned, the plan
  kept); a cancellable one ends aborted. Clean and rollback plans are re-executed.
- completed, aborted and rolled_back are terminal: they accept nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from lakewarden.table import conflicts
from lakewarden.table._frozen import construct, evolve
from lakewarden.table._payloads import PayloadParser, Rejected, SharedPayloads, parse_payload
from lakewarden.table.instant import (
    INGESTION_ACTIONS,
    NO_WORKLOAD_ACTIONS,
    TABLE_SERVICE_ACTIONS,
    TERMINAL_STATES,
    Action,
    Transition,
)
from lakewarden.table.plans import PLAN_KINDS, RollbackPlan, ServicePlan
from lakewarden.table.stats import CommitStats, WorkloadProfile
from lakewarden.table.timeline_state import (
    InstantState,
    ReasonPayload,
    Rejection,
    RequestedPayload,
    StateView,
    TimelineEntry,
    TimelineState,
)

Updates = tuple[InstantState, ...]


_Handler = Callable[[StateView, InstantState, TimelineEntry, PayloadParser], "Updates | Rejected"]


def judge(
    view: StateView, entry: TimelineEntry, parse: PayloadParser | None = None
) -> Updates | Rejected:
    """The instant states ``entry`` changes, or why it is illegal against ``view``.

    ``parse`` reads payloads (default ``parse_payload``: pydantic validation)."""
    parse = parse or parse_payload
    current = view.get(entry.instant)
    if entry.transition is Transition.REQUESTED:
        return _requested(view, current, entry, parse)
    if current is None:
        return Rejected(f"instant {entry.instant} was never requested: no {entry.transition}")
    if current.action != entry.action:
        return Rejected(
            f"instant {entry.instant} is a {current.action}, not a {entry.action}: "
            f"{entry.transition} names the wrong action"
        )
    if current.state in TERMINAL_STATES:
        return Rejected(
            f"instant {entry.instant} is already {current.state} (terminal): "
            f"{entry.transition} has no effect"
        )
    return _HANDLERS[entry.transition](view, current, entry, parse)


def apply(state: TimelineState, entry: TimelineEntry) -> TimelineState | Rejected:
    """The state after ``entry``, or ``Rejected`` when it is illegal (``state`` unchanged)."""
    if entry.seq != state.tail_seq + 1:
        return Rejected(f"entry seq {entry.seq} does not follow tail seq {state.tail_seq}")
    verdict = judge(state, entry)
    if isinstance(verdict, Rejected):
        return verdict
    instants = dict(state.instants)
    instants.update((u.instant, u) for u in verdict)
    return state.model_copy(
        update={
            "instants": instants,
            "tail_seq": entry.seq,
            "last_requested_time": _last_requested(state.last_requested_time, entry),
        }
    )


def _last_requested(previous: str | None, entry: TimelineEntry) -> str | None:
    return entry.instant if entry.transition is Transition.REQUESTED else previous


class Replayer:
    """Folds entries onto a state in place; ``judge`` decides, indexes answer the view.

    Not thread-safe; build one per replay. ``state()`` freezes the result. ``payloads``
    reads payloads for the rules (default ``parse_payload``; a replay of the topic passes
    ``SharedPayloads()``, which validates a payload shared by many entries once).
    """

    def __init__(self, start: TimelineState, *, payloads: PayloadParser | None = None) -> None:
        self._parse = payloads or parse_payload
        self._instants = dict(start.instants)
        self._tail_seq = start.tail_seq
        self._last_requested_time = start.last_requested_time
        self._rejected = list(start.rejected)
        self._start = start
        # Completions fed to this replayer, in log order; older ones are found in ``start``.
        self._completion_order: list[str] = []
        self._pending_plans = {i.instant for i in start.pending_plans()}
        self._inflight_ingestions = {i.instant for i in start.inflight_ingestions()}

    # -- StateView ------------------------------------------------------------------------------

    @property
    def last_requested_time(self) -> str | None:
        return self._last_requested_time

    def get(self, instant: str) -> InstantState | None:
        return self._instants.get(instant)

    def completed_since(self, seq: int) -> Iterator[InstantState]:
        # Newest first: the instants that can conflict are the recent ones.
        for name in reversed(self._completion_order):
            inst = self._instants[name]
            if (inst.completed_seq or 0) <= seq:
                return
            yield inst
        if seq < self._start.tail_seq:  # completed is terminal: start's copies are current
            yield from self._start.completed_since(seq)

    def pending_plans(self) -> Iterable[InstantState]:
        return [self._instants[name] for name in sorted(self._pending_plans)]

    def inflight_ingestions(self) -> Iterable[InstantState]:
        return [self._instants[name] for name in sorted(self._inflight_ingestions)]

    # -- folding --------------------------------------------------------------------------------

    def feed(self, entry: TimelineEntry) -> Rejected | None:
        """Apply ``entry`` (whose seq must be tail+1); returns the rejection, if any."""
        # The hot loop of every replay and timeline load: kept to plain local operations.
        seq = entry.seq
        if seq != self._tail_seq + 1:
            verdict: Updates | Rejected = Rejected(
                f"entry seq {seq} does not follow tail seq {self._tail_seq}"
            )
        else:
            verdict = judge(self, entry, self._parse)
        if seq > self._tail_seq:
            self._tail_seq = seq
        if isinstance(verdict, Rejected):
            self.reject(seq, verdict.reason, entry)
            return verdict
        instants = self._instants
        for update in verdict:
            instants[update.instant] = update
            if update.state is Transition.COMPLETED and update.instant == entry.instant:
                self._completion_order.append(update.instant)
            if update.action in TABLE_SERVICE_ACTIONS:
                if update.is_pending:
                    self._pending_plans.add(update.instant)
                else:
                    self._pending_plans.discard(update.instant)
            elif update.action in INGESTION_ACTIONS:
                if update.state is Transition.INFLIGHT:
                    self._inflight_ingestions.add(update.instant)
                else:
                    self._inflight_ingestions.discard(update.instant)
        if entry.transition is Transition.REQUESTED:
            self._last_requested_time = entry.instant
        return None

    def reject(self, seq: int, reason: str, entry: TimelineEntry | None = None) -> None:
        """Record entry ``seq`` as ignored (also for entries that could not even be parsed)."""
        self._tail_seq = max(self._tail_seq, seq)
        self._rejected.append(
            Rejection(
                seq=seq,
                instant=entry.instant if entry else None,
                action=entry.action if entry else None,
                transition=entry.transition if entry else None,
                reason=reason,
            )
        )

    def state(self) -> TimelineState:
        return TimelineState.model_construct(
            instants=dict(self._instants),
            tail_seq=self._tail_seq,
            last_requested_time=self._last_requested_time,
            rejected=tuple(self._rejected),
        )


# -- one handler per transition ---------------------------------------------------------------


def _requested(
    view: StateView, current: InstantState | None, entry: TimelineEntry, parse: PayloadParser
) -> Updates | Rejected:
    if current is not None:
        return Rejected(f"instant {entry.instant} already exists (state {current.state})")
    last = view.last_requested_time
    if last is not None and entry.instant <= last:
        return Rejected(
            f"instant {entry.instant} is not after the last requested instant {last}: "
            "instant times must be strictly increasing"
        )
    payload = parse(RequestedPayload, entry)
    if isinstance(payload, Rejected):
        return payload
    if payload.cancellable and entry.action not in TABLE_SERVICE_ACTIONS:
        return Rejected(
            f"only compaction and clustering plans may be cancellable, not {entry.action}"
        )
    plan = payload.plan
    allowed = PLAN_KINDS[entry.action]
    if not any(plan is None if kind is None else isinstance(plan, kind) for kind in allowed):
        names = " or ".join("no plan" if k is None else k.__name__ for k in allowed)
        got = "no plan" if plan is None else type(plan).__name__
        return Rejected(f"malformed requested payload: a {entry.action} takes {names}, not {got}")
    # Every value comes from the validated entry and payload: built without re-validation.
    new = construct(
        InstantState,
        {
            "instant": entry.instant,
            "action": entry.action,
            "state": Transition.REQUESTED,
            "cancellable": payload.cancellable,
            "operation": payload.operation,
            "requested_seq": entry.seq,
            "last_seq": entry.seq,
            "lock_token": entry.lock_token,
            "plan": plan,
        },
    )
    if isinstance(plan, ServicePlan):
        return (evolve(new, {"plan_file_groups": plan.file_groups}),)
    if isinstance(plan, RollbackPlan):
        return _rollback_intent(view, new, plan, entry)
    return (new,)


def _rollback_intent(
    view: StateView, new: InstantState, plan: RollbackPlan, entry: TimelineEntry
) -> Updates | Rejected:
    target = view.get(plan.target)
    if target is None or target.action not in INGESTION_ACTIONS:
        return Rejected(
            f"rollback {entry.instant} targets {plan.target}, which is not an ingestion instant"
        )
    if target.state not in (Transition.REQUESTED, Transition.INFLIGHT):
        return Rejected(
            f"rollback {entry.instant} targets {plan.target}, which is {target.state}, not pending"
        )
    if target.rollback_by is not None:
        return Rejected(
            f"rollback {entry.instant} targets {plan.target}, which rollback {target.rollback_by} "
            "already targets: resume that one"
        )
    return (new, evolve(target, {"rollback_by": entry.instant, "last_seq": entry.seq}))


def _inflight(
    view: StateView, current: InstantState, entry: TimelineEntry, parse: PayloadParser
) -> Updates | Rejected:
    if current.state is not Transition.REQUESTED:
        return Rejected(
            f"instant {entry.instant} is {current.state}: inflight only follows requested"
        )
    if current.rollback_by is not None:
        return Rejected(f"instant {entry.instant} is being rolled back by {current.rollback_by}")
    workload = parse(WorkloadProfile, entry)
    if isinstance(workload, Rejected):
        return workload
    return (_advance(current, entry, workload=workload),)


def _completed(
    view: StateView, current: InstantState, entry: TimelineEntry, parse: PayloadParser
) -> Updates | Rejected:
    if current.state is Transition.CANCEL_REQUESTED:
        return Rejected(
            f"instant {entry.instant} has a cancel request: it can never complete (only abort)"
        )
    if current.rollback_by is not None:
        return Rejected(
            f"instant {entry.instant} is being rolled back by {current.rollback_by}: "
            "it can never complete"
        )
    allowed = {Transition.INFLIGHT}
    if entry.action in NO_WORKLOAD_ACTIONS:
        allowed.add(Transition.REQUESTED)
    if current.state not in allowed:
        return Rejected(
            f"instant {entry.instant} is {current.state}: "
            f"a {entry.action} completes only from inflight"
        )
    stats = parse(CommitStats, entry)
    if isinstance(stats, Rejected):
        return stats
    if entry.action is Action.ROLLBACK:
        plan = current.plan
        target = view.get(plan.target) if isinstance(plan, RollbackPlan) else None
        if target is None or target.state is not Transition.ROLLED_BACK:
            return Rejected(
                f"rollback {entry.instant} completes only after its target is rolled_back"
            )
    finding = conflicts.find_conflict(view, current, stats)
    if finding is not None:
        return Rejected(finding.describe())
    # The write statistics are authoritative from now on; the workload profile only served
    # conflict checks while pending (a file group it named but did not write did not change).
    # An overwrite's claim on every file group is kept. Dropping it keeps checkpoints small.
    workload = current.workload if current.workload and current.workload.replaces_all else None
    return (_advance(current, entry, commit=stats, completed_seq=entry.seq, workload=workload),)


def _cancel_requested(
    view: StateView, current: InstantState, entry: TimelineEntry, parse: PayloadParser
) -> Updates | Rejected:
    if entry.action not in TABLE_SERVICE_ACTIONS or not current.cancellable:
        return Rejected(
            f"instant {entry.instant} is not a cancellable plan: it cannot be cancelled"
        )
    if current.state not in (Transition.REQUESTED, Transition.INFLIGHT):
        return Rejected(
            f"instant {entry.instant} is {current.state}: only a pending plan can be cancelled"
        )
    return _with_reason(current, entry, parse)


def _aborted(
    view: StateView, current: InstantState, entry: TimelineEntry, parse: PayloadParser
) -> Updates | Rejected:
    if entry.action not in TABLE_SERVICE_ACTIONS or not current.cancellable:
        return Rejected(f"instant {entry.instant} is not a cancellable plan: it cannot be aborted")
    if current.state is not Transition.CANCEL_REQUESTED:
        return Rejected(
            f"instant {entry.instant} is {current.state}: aborted only follows cancel_requested"
        )
    return _with_reason(current, entry, parse)


def _rolled_back(
    view: StateView, current: InstantState, entry: TimelineEntry, parse: PayloadParser
) -> Updates | Rejected:
    if entry.action not in INGESTION_ACTIONS:
        return Rejected(
            f"instant {entry.instant} is a {entry.action}: only ingestion is rolled back "
            "(plans are completed or, when cancellable, aborted)"
        )
    if current.state not in (Transition.REQUESTED, Transition.INFLIGHT):
        return Rejected(
            f"instant {entry.instant} is {current.state}: only a pending write can be rolled back"
        )
    return _with_reason(current, entry, parse)


def _with_reason(
    current: InstantState, entry: TimelineEntry, parse: PayloadParser
) -> Updates | Rejected:
    payload = parse(ReasonPayload, entry)
    if isinstance(payload, Rejected):
        return payload
    return (
        _advance(
            current,
            entry,
            reason=payload.reason,
            failed_stage=payload.failed_stage,
            failed_job_id=payload.job_id,
            error_type=payload.error_type,
        ),
    )


def _advance(current: InstantState, entry: TimelineEntry, **changes: object) -> InstantState:
    # The next state shares every unchanged value with the current one (``evolve``).
    return evolve(
        current,
        {
            "state": entry.transition,
            "last_seq": entry.seq,
            "lock_token": entry.lock_token,
            **changes,
        },
    )


_HANDLERS: dict[Transition, _Handler] = {
    Transition.INFLIGHT: _inflight,
    Transition.COMPLETED: _completed,
    Transition.CANCEL_REQUESTED: _cancel_requested,
    Transition.ABORTED: _aborted,
    Transition.ROLLED_BACK: _rolled_back,
}


__all__ = [
    "PayloadParser",
    "Rejected",
    "Replayer",
    "SharedPayloads",
    "Updates",
    "apply",
    "judge",
    "parse_payload",
]
