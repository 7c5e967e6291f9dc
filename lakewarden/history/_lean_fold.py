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
  object: equal payload texts share one dict), or be ``UNCHECKED``: a large read folds the
  ``inflight`` and ``completed`` payloads as valid, and a ``requested`` one unread when it
  is laid out as lakewarden writes an ingestion's (``plain_ingestion``), while a second
  process checks them (``_validate``: valid, and for those ``requested`` ones a payload
  this step takes), and reads again validating here when one is not. The instant's state
  is then a list updated in place (``_Fast``) that holds those entries, built as the
  ``InstantState`` the state machine would have built, payload models included, when
  someone needs it (``state()``, or a later entry that leaves the fast path); ``summary()``
  counts the states without building them.
- **Everything else** (other actions, plans, cancels, rollbacks, a malformed payload, a
  conflict candidate, any rejection) is judged by ``state_machine.judge`` with this fold as
  its ``StateView``, and applied with the bookkeeping of ``Replayer.feed``.

The fast path is the state machine's rules restricted to the case where each of them is
known to pass; ``tests/unit/history/test_lean_fold.py`` feeds the same generated entry
sequences (legal and illegal) to this fold and to ``Replayer`` and asserts the same instant
states, tail, last requested instant and rejections with their reasons.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, TypeGuard, cast

from pydantic import BaseModel, ValidationError

from lakewarden.history._validate import fast_requested, plain_ingestion
from lakewarden.table._frozen import construct
from lakewarden.table._payloads import SHARED_PAYLOADS_LIMIT, Rejected, SharedPayloads
from lakewarden.table.instant import INGESTION_ACTIONS, TABLE_SERVICE_ACTIONS, Action, Transition
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
_FAST_COMMIT: Final = Action.COMMIT  # the fast actions: ingestion
_FAST_DELTACOMMIT: Final = Action.DELTACOMMIT


# A timeline entry as replay holds it: ``TimelineEntry``'s fields with their validated
# values, built without pydantic, in a plain tuple (positions below): seq, instant, action,
# transition, actor, lock_token, wall_time_ms, the payload as its JSON text (an object) and,
# for the transitions the fast path takes, the payload validated as the rule's model when it
# is valid (``FAST_MODELS``; else None), or ``UNCHECKED``: a ``requested`` / ``inflight`` /
# ``completed`` payload folded as valid while a second process checks it (``_validate``; the
# read folds again, validating in process, when one was not). ``PayloadTexts.entry`` makes
# the model.
#
# A plain tuple rather than a NamedTuple: replay builds one per event, and an instance of a
# tuple subclass costs a second tuple and a copy (``tuple.__new__``), which was 2-3% of a
# replay of a million events. ``is_lean`` tells one from a ``TimelineEntry``.
LeanEntry: TypeAlias = tuple[
    int, str, Action, Transition, str, int | None, int, str, BaseModel | None
]
# The positions of its fields.
SEQ: Final = 0
INSTANT: Final = 1
ACTION: Final = 2
TRANSITION: Final = 3
ACTOR: Final = 4
LOCK_TOKEN: Final = 5
WALL_TIME_MS: Final = 6
PAYLOAD_TEXT: Final = 7
PAYLOAD_MODEL: Final = 8


def is_lean(entry: LeanEntry | TimelineEntry) -> TypeGuard[LeanEntry]:
    """Whether ``entry`` is a ``LeanEntry`` (the hot paths test ``type(entry) is tuple``)."""
    return type(entry) is tuple


def entry_seq(entry: LeanEntry | TimelineEntry) -> int:
    """The seq of either kind of entry."""
    return entry[SEQ] if is_lean(entry) else entry.seq  # type: ignore[union-attr]


class _Unchecked(BaseModel):
    """The type of ``UNCHECKED`` (a model so that ``LeanEntry.payload_model`` keeps its type;
    never read as one)."""


# An optimistic entry's payload model: not validated yet (truthy and not None, so the fast
# steps take it as valid; its model is built from the text when someone reads it).
UNCHECKED: Final = _Unchecked()

# The model each fast transition's rule reads its payload as (``state_machine``'s handlers).
FAST_MODELS: Final[dict[Transition, type[BaseModel]]] = {
    Transition.REQUESTED: RequestedPayload,
    Transition.INFLIGHT: WorkloadProfile,
    Transition.COMPLETED: CommitStats,
}


class PayloadTexts:
    """Payload texts parsed (``parsed``) and validated (``model``) once while they repeat;
    both bounded, for payloads that never repeat. Not thread-safe."""

    def __init__(self) -> None:
        self._parsed: dict[str, object] = {}
        # By fast transition: text -> model (None: invalid); read directly by the hot loop.
        self.models: dict[Transition, dict[str, BaseModel | None]] = {t: {} for t in FAST_MODELS}
        # The same caches by the transition's name as decoded (a ``str``): an enum member's
        # hash is ``Enum.__hash__``, a Python call, on every lookup of a million.
        self.models_by_name = {t.value: cache for t, cache in self.models.items()}

    def parsed(self, text: str) -> object:
        """``json.loads(text)``, the same object for an equal text seen recently.

        Raises: ValueError (not JSON)."""
        payload = self._parsed.get(text)
        if payload is None:
            payload = json.loads(text)
            if len(self._parsed) >= SHARED_PAYLOADS_LIMIT:
                self._parsed.clear()
            self._parsed[text] = payload
        return payload

    def model(self, transition: Transition, text: str) -> BaseModel | None:
        """``text`` validated as ``FAST_MODELS[transition]``; None when it does not validate
        from JSON (the state machine then judges the parsed payload itself).

        Validated straight from the JSON text (no dict built): for these models (strings,
        integers, booleans, tuples of models, the discriminated plan union) a JSON object
        and the dict ``json.loads`` makes of it validate alike (duplicate keys: the last
        wins in both); what pydantic's JSON parser refuses and ``json.loads`` accepts (NaN,
        a lone surrogate) goes to the state machine (``test_lean_fold`` generates both)."""
        cache = self.models[transition]
        if text in cache:
            return cache[text]
        try:
            model: BaseModel | None = FAST_MODELS[transition].model_validate_json(text)
        except ValidationError:
            model = None
        if len(cache) >= SHARED_PAYLOADS_LIMIT:
            cache.clear()
        cache[text] = model
        return model

    def checked(self, lean: LeanEntry) -> LeanEntry | None:
        """``lean`` with its ``UNCHECKED`` payload validated here; None when its text is not
        a JSON object (such a record makes no entry: the read that folded it as valid is
        wrong, and its verdict says so)."""
        if lean[PAYLOAD_MODEL] is not UNCHECKED:
            return lean
        text = lean[PAYLOAD_TEXT]
        model = self.model(lean[TRANSITION], text)
        try:
            if model is None and type(self.parsed(text)) is not dict:
                return None
        except ValueError:
            return None
        seq, instant, action, transition, actor, token, wall, _, _ = lean
        return (seq, instant, action, transition, actor, token, wall, text, model)

    def payload(self, lean: LeanEntry | None) -> Any:
        """The model of a fast step's entry (None for none; validated here when the entry
        is ``UNCHECKED``: None when invalid, which the read's verdict also reports)."""
        if lean is None:
            return None
        model = lean[PAYLOAD_MODEL]
        if model is UNCHECKED:
            return self.model(lean[TRANSITION], lean[PAYLOAD_TEXT])
        return model

    def entry(self, lean: LeanEntry | TimelineEntry) -> TimelineEntry:
        """The ``TimelineEntry`` of ``lean`` (values already valid: built without validation).

        Raises: ValueError (the text is not JSON: a ``LeanEntry`` is only made of one that is)."""
        if not is_lean(lean):
            return lean  # type: ignore[return-value]  # a TimelineEntry
        return construct(
            TimelineEntry,
            {
                "seq": lean[SEQ],
                "instant": lean[INSTANT],
                "action": lean[ACTION],
                "transition": lean[TRANSITION],
                "actor": lean[ACTOR],
                "lock_token": lean[LOCK_TOKEN],
                "wall_time_ms": lean[WALL_TIME_MS],
                "payload": self.parsed(lean[PAYLOAD_TEXT]),
            },
        )


# A fast instant's state, updated in place: [action, state, operation, requested_seq,
# last_seq, lock_token, plan, workload, commit, completed_seq]; workload and commit are the
# ``inflight`` / ``completed`` entries, and in an optimistic fold the plan is the
# ``requested`` entry and the operation None (their models are built by ``_built`` when the
# state is read: an optimistic fold validates none of them on its thread).
_Fast = list[Any]
_STATE, _LAST_SEQ, _TOKEN, _WORKLOAD, _COMMIT, _COMPLETED_SEQ = 1, 4, 5, 7, 8, 9


class LeanFold:
    """Folds entries in seq order (``feed``); ``state()`` is ``Replayer.state()``'s result.

    Implements ``StateView`` for the state machine's rules (slow path). Not thread-safe."""

    def __init__(self, texts: PayloadTexts) -> None:
        self._texts = texts
        self._instants: dict[str, InstantState | _Fast] = {}
        self._tail_seq = -1
        self._last_requested_time: str | None = None
        self._rejected: list[Rejection] = []
        # (completed_seq, instant) in log order: completed_since and the fast conflict test.
        self._completions: list[tuple[int, str]] = []
        self._pending_plans: set[str] = set()
        self._inflight_ingestions: set[str] = set()
        self._parse = SharedPayloads()
        # The fast path by transition: each takes the entry (True) or leaves it untouched.
        self.fast: dict[Transition, Callable[[LeanEntry], bool]] = {
            _REQUESTED: self._requested,
            _INFLIGHT: self._inflight,
            _COMPLETED: self._completed,
        }
        self.fast_by_name = {t.value: step for t, step in self.fast.items()}  # see models_by_name

    # -- StateView ------------------------------------------------------------------------------

    @property
    def last_requested_time(self) -> str | None:
        return self._last_requested_time

    def get(self, instant: str) -> InstantState | None:
        found = self._instants.get(instant)
        if isinstance(found, list):
            found = self._instants[instant] = _built(instant, found, self._texts)
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

    def inflight_ingestions(self) -> Iterable[InstantState]:
        found = (self.get(name) for name in sorted(self._inflight_ingestions))
        return [i for i in found if i is not None]

    # -- folding --------------------------------------------------------------------------------

    def feed(self, entry: LeanEntry | TimelineEntry) -> None:
        """Apply ``entry``; an illegal one is recorded in ``state().rejected``."""
        if type(entry) is tuple:  # a LeanEntry
            fast = self.fast.get(entry[TRANSITION])
            if fast is not None and fast(entry):
                return
        self.judged(entry)

    def judged(self, entry: LeanEntry | TimelineEntry) -> None:
        """Apply ``entry`` through the state machine (``feed`` when the fast path declined
        it: a caller that tried ``fast`` itself). An ``UNCHECKED`` payload is validated here
        first (the state machine reads it)."""
        if type(entry) is tuple and entry[PAYLOAD_MODEL] is UNCHECKED:  # a LeanEntry's
            checked = self._texts.checked(entry)
            if checked is None:  # makes no entry: this fold is wrong, its verdict will say so
                return
            entry = checked
        self._judged(self._texts.entry(entry))

    # Each fast step takes the entry, updating the tail, when every condition of the path
    # holds (True), and otherwise changes nothing (False).
    # (Written for a million calls: each field read once into a local, a list item stored
    # by its own statement rather than by unpacking a tuple built for it.)

    def _requested(self, entry: LeanEntry) -> bool:
        seq, action = entry[SEQ], entry[ACTION]
        if seq != self._tail_seq + 1 or (
            action is not _FAST_COMMIT and action is not _FAST_DELTACOMMIT  # no enum hash
        ):
            return False
        instant, instants, last = entry[INSTANT], self._instants, self._last_requested_time
        if instant in instants or (last is not None and instant <= last):
            return False
        payload: Any = entry[PAYLOAD_MODEL]  # RequestedPayload | None (FAST_MODELS) | UNCHECKED
        text = entry[PAYLOAD_TEXT]
        if payload is UNCHECKED and plain_ingestion(text):
            # Taken unread: the checker process fails the read unless the text is valid and
            # ``fast_requested``; its operation and plan are read from it when it is built.
            operation, plan = None, entry
        else:
            if payload is UNCHECKED:
                payload = self._texts.model(_REQUESTED, text)  # another layout: checked here
            if payload is None or not fast_requested(payload):
                return False
            operation, plan = payload.operation, payload.plan
        instants[instant] = [
            action, _REQUESTED, operation, seq, seq, entry[LOCK_TOKEN], plan, None, None, None,
        ]  # fmt: skip
        self._last_requested_time = instant
        self._tail_seq = seq
        return True

    def _inflight(self, entry: LeanEntry) -> bool:
        fast = self._instants.get(entry[INSTANT])
        seq = entry[SEQ]
        if (
            type(fast) is not list
            or fast[_STATE] is not _REQUESTED
            or fast[0] is not entry[ACTION]
            or seq != self._tail_seq + 1
        ):
            return False
        if entry[PAYLOAD_MODEL] is None:  # WorkloadProfile, UNCHECKED or None (invalid)
            return False
        fast[_STATE] = _INFLIGHT
        fast[_LAST_SEQ] = seq
        fast[_TOKEN] = entry[LOCK_TOKEN]
        fast[_WORKLOAD] = entry
        self._inflight_ingestions.add(entry[INSTANT])  # fast instants are ingestions
        self._tail_seq = seq
        return True

    def _completed(self, entry: LeanEntry) -> bool:
        instant = entry[INSTANT]
        fast = self._instants.get(instant)
        seq = entry[SEQ]
        if (
            type(fast) is not list
            or fast[_STATE] is not _INFLIGHT
            or fast[0] is not entry[ACTION]
            or seq != self._tail_seq + 1
        ):
            return False
        completions = self._completions
        # Both conflict rules would find nothing to compare: no instant completed after this
        # one was requested (completed_since is empty), no plan is pending.
        if (completions and completions[-1][0] > fast[3]) or self._pending_plans:
            return False
        if entry[PAYLOAD_MODEL] is None:  # CommitStats, UNCHECKED or None (invalid)
            return False
        fast[_STATE] = _COMPLETED
        fast[_LAST_SEQ] = fast[_COMPLETED_SEQ] = seq
        fast[_TOKEN] = entry[LOCK_TOKEN]
        fast[_COMMIT] = entry  # the workload it keeps (if it replaces_all): ``_built``
        self._inflight_ingestions.discard(instant)
        completions.append((seq, instant))
        self._tail_seq = seq
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
            elif update.action in INGESTION_ACTIONS:
                if update.state is _INFLIGHT:
                    self._inflight_ingestions.add(update.instant)
                else:
                    self._inflight_ingestions.discard(update.instant)
        if entry.transition is _REQUESTED:
            self._last_requested_time = entry.instant

    def state(self) -> TimelineState:
        """The state after every entry fed (fast instants built as ``InstantState``)."""
        instants, texts = self._instants, self._texts
        for name, found in instants.items():
            if type(found) is list:  # replaced in place: the keys and their order stay
                instants[name] = _built(name, found, texts)
        return TimelineState.model_construct(
            instants=cast(dict[str, InstantState], dict(instants)),  # none is a list now
            tail_seq=self._tail_seq,
            last_requested_time=self._last_requested_time,
            rejected=tuple(self._rejected),
        )

    def summary(self) -> FoldSummary:
        """What ``state()`` says of every instant's state, the tail and the rejections,
        without building the instants' states (nor their payload models)."""
        # Counted by member, named after: ``.value`` is a Python property, read once a state
        # instead of once an instant (the counts and their first-seen order are the same).
        by_state = Counter(
            [
                found[_STATE] if type(found) is list else found.state  # type: ignore[union-attr]
                for found in self._instants.values()
            ]
        )
        counts: Counter[str] = Counter({state.value: n for state, n in by_state.items()})
        return FoldSummary(counts, self._tail_seq, tuple(self._rejected))


@dataclass(frozen=True, slots=True)
class FoldSummary:
    """A fold's outcome as ``lakewarden replay`` reports it: instants by state (the
    transition's name), the tail seq and the rejected entries."""

    states: Counter[str]
    tail_seq: int
    rejected: tuple[Rejection, ...]


# The default of the one field a fast instant leaves unset whose default is not None or False.
_NO_GROUPS: Final = InstantState.model_fields["plan_file_groups"].default
# The fields a fast instant's ``InstantState`` has set (``model_fields_set``) after each
# fast step, one set per step shared by every fast instant: a frozen model's set is never
# changed in place (pydantic's ``model_copy`` copies it before adding to it, ``evolve`` makes
# a new one), and a set per instant was a fifth of a replay's ``state()``.
_SET_BY: Final = {
    _REQUESTED: frozenset(
        ("instant", "action", "state", "cancellable", "operation", "requested_seq")
        + ("last_seq", "lock_token", "plan")
    ),
}
_SET_BY[_INFLIGHT] = _SET_BY[_REQUESTED] | {"workload"}
_SET_BY[_COMPLETED] = _SET_BY[_INFLIGHT] | {"commit", "completed_seq"}
_SHARED_SET: Final = {state: set(names) for state, names in _SET_BY.items()}
_SET_COMPLETED: Final = _SHARED_SET[_COMPLETED]
_set = object.__setattr__
_new = object.__new__


def _built(instant: str, fast: _Fast, texts: PayloadTexts) -> InstantState:
    """The ``InstantState`` the state machine's handlers build for a fast instant, its
    payload models read from its entries (``PayloadTexts.payload``); a completed one keeps
    its workload only when it replaces all, as the completed handler does.

    One per instant of a replay, so its ``__dict__`` is the one Python makes for a new
    instance, filled field by field in the model's order (a key-sharing dict: a third
    smaller and cheaper to fill than a copy of a dict of defaults); the fields a fast
    instant never sets hold their defaults (``test_lean_fold`` checks the keys, their order
    and the values against the state machine's)."""
    state = fast[_STATE]
    operation, plan = fast[2], fast[6]
    if type(plan) is tuple:  # an optimistic fold's: the requested LeanEntry, read now
        requested = texts.payload(plan)
        operation = None if requested is None else requested.operation
        plan = None if requested is None else requested.plan
    new = _new(InstantState)
    values = new.__dict__
    values["instant"] = instant
    values["action"] = fast[0]
    values["state"] = state
    values["cancellable"] = False
    values["operation"] = operation
    values["requested_seq"] = fast[3]
    values["last_seq"] = fast[_LAST_SEQ]
    values["completed_seq"] = fast[_COMPLETED_SEQ]
    workload = texts.payload(fast[_WORKLOAD])
    if state is _COMPLETED and workload is not None and not workload.replaces_all:
        workload = None
    values["workload"] = workload
    values["commit"] = texts.payload(fast[_COMMIT])
    values["lock_token"] = fast[_TOKEN]
    values["plan"] = plan
    values["plan_file_groups"] = _NO_GROUPS
    values["rollback_by"] = values["reason"] = values["failed_stage"] = None
    values["failed_job_id"] = values["error_type"] = None
    fields_set = _SET_COMPLETED if state is _COMPLETED else _SHARED_SET[state]  # most: completed
    _set(new, "__pydantic_fields_set__", fields_set)
    _set(new, "__pydantic_extra__", None)
    _set(new, "__pydantic_private__", None)
    return new


__all__ = [
    "FAST_MODELS",
    "UNCHECKED",
    "is_lean",
    "entry_seq",
    "FoldSummary",
    "LeanEntry",
    "LeanFold",
    "PayloadTexts",
]
