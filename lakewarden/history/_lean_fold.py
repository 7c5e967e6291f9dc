"""Replay's fold of the timeline topic: the state machine's verdicts without its per-entry cost.

``lakewarden replay`` folds every ``TimelineTransition`` of a table (a million, for a busy
one). ``state_machine.Replayer`` pays per entry a pydantic ``TimelineEntry``, a judge through
five Python calls and a new frozen ``InstantState``: twice what reading and decoding the event
costs. Almost every entry of a real log is one step of the same path: an ingestion instant
(commit, deltacommit) requested, then inflight, then completed, with nothing racing it.
``LeanFold`` takes that path itself and hands every other entry to the state machine:

- **Fast path** (``_requested`` / ``_inflight`` / ``_completed`` below), all of it required:
  the entry's seq is the next one; a ``requested`` ingestion instant that is new, later than
  the last requested one, with a valid, non-cancellable payload whose plan is none, a job plan
  or an untyped plan; an ``inflight`` of a fast instant in ``requested``; a ``completed`` of a
  fast instant in ``inflight`` when no instant completed since it was requested and no
  compaction or clustering plan is pending (so neither conflict rule has anything to compare
  it with). The payload must validate as the rule's model (validated once per payload
  object: equal payload texts share one dict). The instant's state is then a list updated in
  place (``_Fast``), built as the ``InstantState`` the state machine would have built when
  someone needs it (``state()``, or a later entry that leaves the fast path).
- **Everything else** (other actions, plans, cancels, rollbacks, a malformed payload, a
  conflict candidate, any rejection) is judged by ``state_machine.judge`` with this fold as
  its ``StateView``, and applied with the bookkeeping of ``Replayer.feed``.

The fast path is the state machine's rules restricted to the case where each of them is
known to pass; ``tests/unit/history/test_lean_fold.py`` feeds the same generated entry
sequences (legal and illegal) to this fold and to ``Replayer`` and asserts the same instant
states, tail, last requested instant and rejections with their reasons.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final, NamedTuple

from pydantic import BaseModel, ValidationError

from lakewarden.table._frozen import construct
from lakewarden.table._payloads import SHARED_PAYLOADS_LIMIT, Rejected, SharedPayloads
from lakewarden.table.instant import TABLE_SERVICE_ACTIONS, Action, Transition
from lakewarden.table.plans import JobPlan, UntypedPlan
from lakewarden.table.state_machine import judge
from lakewarden.table.stats import CommitStats, WorkloadProfile
from lakewarden.table.timeline_state import (
    InstantState,
    Rejection,
    RequestedPayload,
    TimelineEntry,
    TimelineState,
)

_REQUESTED: Final = Transition.REQUESTED
_INFLIGHT: Final = Transition.INFLIGHT
_COMPLETED: Final = Transition.COMPLETED
_FAST_ACTIONS: Final = frozenset({Action.COMMIT, Action.DELTACOMMIT})
_FAST_PLANS: Final = (type(None), JobPlan, UntypedPlan)


class LeanEntry(NamedTuple):
    """A timeline entry as replay holds it: ``TimelineEntry``'s fields with their validated
    values, built without pydantic (``entry()`` makes the model)."""

    seq: int
    instant: str
    action: Action
    transition: Transition
    actor: str
    lock_token: int | None
    wall_time_ms: int
    payload: dict[str, Any]

    def entry(self) -> TimelineEntry:
        """The ``TimelineEntry`` (its values are already valid: built without validation)."""
        return construct(TimelineEntry, self._asdict())


# ``NamedTuple``'s generated __new__ is Python code; tuple.__new__ builds the same object.
new_lean_entry: Final = tuple.__new__


def as_entry(entry: LeanEntry | TimelineEntry) -> TimelineEntry:
    return entry.entry() if isinstance(entry, LeanEntry) else entry


# A fast instant's state, updated in place: [action, state, operation, requested_seq,
# last_seq, lock_token, plan, workload, commit, completed_seq].
_Fast = list[Any]
_STATE, _LAST_SEQ, _TOKEN, _WORKLOAD, _COMMIT, _COMPLETED_SEQ = 1, 4, 5, 7, 8, 9


class LeanFold:
    """Folds entries in seq order (``feed``); ``state()`` is ``Replayer.state()``'s result.

    Implements ``StateView`` for the state machine's rules (slow path). Not thread-safe."""

    def __init__(self) -> None:
        self._instants: dict[str, InstantState | _Fast] = {}
        self._tail_seq = -1
        self._last_requested_time: str | None = None
        self._rejected: list[Rejection] = []
        # (completed_seq, instant) in log order: completed_since and the fast conflict test.
        self._completions: list[tuple[int, str]] = []
        self._pending_plans: set[str] = set()
        self._parse = SharedPayloads()
        # Per fast transition: id(payload) -> (payload, its model), or None when it does not
        # validate (the slow path then says why).
        self._models: dict[Transition, dict[int, tuple[object, BaseModel | None]]] = {
            _REQUESTED: {},
            _INFLIGHT: {},
            _COMPLETED: {},
        }

    # -- StateView ------------------------------------------------------------------------------

    @property
    def last_requested_time(self) -> str | None:
        return self._last_requested_time

    def get(self, instant: str) -> InstantState | None:
        found = self._instants.get(instant)
        if isinstance(found, list):
            found = self._instants[instant] = _built(instant, found)
        return found

    def completed_since(self, seq: int) -> Iterator[InstantState]:
        for completed_seq, name in reversed(self._completions):  # newest first, as Replayer
            if completed_seq <= seq:
                return
            found = self.get(name)
            if found is not None:
                yield found

    def pending_plans(self) -> Iterable[InstantState]:
        return [self._instants[name] for name in sorted(self._pending_plans)]  # type: ignore[misc]

    # -- folding --------------------------------------------------------------------------------

    def feed(self, entry: LeanEntry | TimelineEntry) -> None:
        """Apply ``entry``; an illegal one is recorded in ``state().rejected``."""
        if type(entry) is LeanEntry and entry[0] == self._tail_seq + 1:
            transition = entry[3]
            if transition is _INFLIGHT:
                done = self._inflight(entry)
            elif transition is _COMPLETED:
                done = self._completed(entry)
            elif transition is _REQUESTED:
                done = self._requested(entry)
            else:
                done = False
            if done:
                self._tail_seq = entry[0]
                return
        self._judged(as_entry(entry))

    def _model(self, entry: LeanEntry, model: type[BaseModel]) -> Any:
        """``entry``'s payload as ``model`` (None when it does not validate), once per
        payload object."""
        payload = entry[7]
        cache = self._models[entry[3]]
        hit = cache.get(id(payload))
        if hit is not None and hit[0] is payload:
            return hit[1]
        try:
            valid: BaseModel | None = model.model_validate(payload)
        except ValidationError:
            valid = None
        if len(cache) >= SHARED_PAYLOADS_LIMIT:
            cache.clear()
        cache[id(payload)] = (payload, valid)
        return valid

    def _requested(self, entry: LeanEntry) -> bool:
        instant = entry[1]
        last = self._last_requested_time
        if (
            entry[2] not in _FAST_ACTIONS
            or instant in self._instants
            or (last is not None and instant <= last)
        ):
            return False
        payload = self._model(entry, RequestedPayload)
        if payload is None or payload.cancellable or type(payload.plan) not in _FAST_PLANS:
            return False
        seq = entry[0]
        self._instants[instant] = [
            entry[2], _REQUESTED, payload.operation, seq, seq, entry[5], payload.plan,
            None, None, None,
        ]  # fmt: skip
        self._last_requested_time = instant
        return True

    def _inflight(self, entry: LeanEntry) -> bool:
        fast = self._instants.get(entry[1])
        if type(fast) is not list or fast[_STATE] is not _REQUESTED or fast[0] is not entry[2]:
            return False
        workload = self._model(entry, WorkloadProfile)
        if workload is None:
            return False
        fast[_STATE], fast[_LAST_SEQ], fast[_TOKEN], fast[_WORKLOAD] = (
            _INFLIGHT, entry[0], entry[5], workload,
        )  # fmt: skip
        return True

    def _completed(self, entry: LeanEntry) -> bool:
        instant = entry[1]
        fast = self._instants.get(instant)
        if type(fast) is not list or fast[_STATE] is not _INFLIGHT or fast[0] is not entry[2]:
            return False
        completions = self._completions
        # Both conflict rules would find nothing to compare: no instant completed after this
        # one was requested (completed_since is empty), no plan is pending.
        if (completions and completions[-1][0] > fast[3]) or self._pending_plans:
            return False
        stats = self._model(entry, CommitStats)
        if stats is None:
            return False
        seq = entry[0]
        workload = fast[_WORKLOAD]
        fast[_STATE], fast[_LAST_SEQ], fast[_TOKEN], fast[_COMMIT], fast[_COMPLETED_SEQ] = (
            _COMPLETED, seq, entry[5], stats, seq,
        )  # fmt: skip
        fast[_WORKLOAD] = workload if workload is not None and workload.replaces_all else None
        completions.append((seq, instant))
        return True

    def _judged(self, entry: TimelineEntry) -> None:
        """``Replayer.feed``: the state machine judges, the updates are applied."""
        seq = entry.seq
        verdict: tuple[InstantState, ...] | Rejected
        if seq != self._tail_seq + 1:
            verdict = Rejected(f"entry seq {seq} does not follow tail seq {self._tail_seq}")
        else:
            verdict = judge(self, entry, self._parse)
        if seq > self._tail_seq:
            self._tail_seq = seq
        if isinstance(verdict, Rejected):
            self._rejected.append(
                Rejection(
                    seq=seq,
                    instant=entry.instant,
                    action=entry.action,
                    transition=entry.transition,
                    reason=verdict.reason,
                )
            )
            return
        for update in verdict:
            self._instants[update.instant] = update
            if update.state is _COMPLETED and update.instant == entry.instant:
                self._completions.append((seq, update.instant))
            if update.action in TABLE_SERVICE_ACTIONS:
                if update.is_pending:
                    self._pending_plans.add(update.instant)
                else:
                    self._pending_plans.discard(update.instant)
        if entry.transition is _REQUESTED:
            self._last_requested_time = entry.instant

    def _built(self, instant: str) -> InstantState:
        found = self.get(instant)
        assert found is not None  # a name of ``_instants``
        return found

    def state(self) -> TimelineState:
        """The state after every entry fed (fast instants built as ``InstantState``)."""
        return TimelineState.model_construct(
            instants={name: self._built(name) for name in self._instants},
            tail_seq=self._tail_seq,
            last_requested_time=self._last_requested_time,
            rejected=tuple(self._rejected),
        )


# What the state machine's ``construct`` fills in for the fields a requested entry leaves
# unset, and the fields it sets (``model_fields_set``) after each fast step.
_DEFAULTS: Final = construct(
    InstantState,
    {
        "instant": "",
        "action": Action.COMMIT,
        "state": _REQUESTED,
        "requested_seq": 0,
        "last_seq": 0,
    },
).__dict__
_SET_BY: Final = {
    _REQUESTED: frozenset(
        ("instant", "action", "state", "cancellable", "operation", "requested_seq")
        + ("last_seq", "lock_token", "plan")
    ),
}
_SET_BY[_INFLIGHT] = _SET_BY[_REQUESTED] | {"workload"}
_SET_BY[_COMPLETED] = _SET_BY[_INFLIGHT] | {"commit", "completed_seq"}
_set = object.__setattr__


def _built(instant: str, fast: _Fast) -> InstantState:
    """The ``InstantState`` the state machine's handlers build for a fast instant."""
    values = _DEFAULTS.copy()
    values.update(
        instant=instant,
        action=fast[0],
        state=fast[_STATE],
        cancellable=False,
        operation=fast[2],
        requested_seq=fast[3],
        last_seq=fast[_LAST_SEQ],
        lock_token=fast[_TOKEN],
        plan=fast[6],
        workload=fast[_WORKLOAD],
        commit=fast[_COMMIT],
        completed_seq=fast[_COMPLETED_SEQ],
    )
    new = object.__new__(InstantState)
    _set(new, "__dict__", values)
    _set(new, "__pydantic_fields_set__", set(_SET_BY[fast[_STATE]]))
    _set(new, "__pydantic_extra__", None)
    _set(new, "__pydantic_private__", None)
    return new


__all__ = ["LeanEntry", "LeanFold", "as_entry", "new_lean_entry"]
