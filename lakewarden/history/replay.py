"""Replay: the timeline rebuilt from the timeline topic alone, diffed against storage.

``diff_timelines(topic, storage)`` is pure: it compares, seq by seq, the entries the
``TimelineTransition`` events describe with the entries read from the table's storage, and
names each difference:

- ``missing``: the topic has entry N, storage does not (deleted or never written there);
- ``extra``: storage has entry N, the topic does not (never published, or lost to retention);
- ``different``: both have entry N but a field differs (the fields are named);
- ``conflicting``: the topic holds two different events for entry N;
- ``malformed``: storage's entry N does not parse.

Sequence numbers make gaps visible: an entry the topic lacks below its newest one shows up as
``extra`` even when storage is intact. ``read_storage_entries`` reads the log by listing and,
unlike ``Timeline.load``, carries on past a hole, because a hole is what replay must report.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, Literal

from pydantic import ValidationError

from lakewarden.history._lean_fold import FoldSummary, LeanEntry, LeanFold, PayloadTexts, entry_seq
from lakewarden.history.fold import epoch_ms
from lakewarden.history.model import Recorded
from lakewarden.storage import Storage
from lakewarden.table._frozen import construct
from lakewarden.table.checkpoint import TIMELINE_PREFIX, seq_of
from lakewarden.table.instant import Action, Transition
from lakewarden.table.state_machine import Replayer, SharedPayloads
from lakewarden.table.timeline_state import TimelineEntry, TimelineState

DifferenceKind = Literal["missing", "extra", "different", "conflicting", "malformed"]
_COMPARED = ("instant", "action", "transition", "actor", "lock_token", "wall_time_ms", "payload")


@dataclass(frozen=True, slots=True)
class Difference:
    """One entry on which the topic and storage disagree."""

    seq: int
    kind: DifferenceKind
    detail: str


@dataclass(frozen=True)
class ReplayReport:
    """The rebuilt timeline (``state``: the state machine folded over the topic's entries,
    built when first read) and every difference from storage, in seq order."""

    topic_entries: int
    storage_entries: int
    differences: tuple[Difference, ...]
    fold: Callable[[], TimelineState] = field(repr=False, compare=False)

    @cached_property
    def state(self) -> TimelineState:
        """The rebuilt timeline (``lakewarden replay`` prints ``TopicReplay.summary()``
        instead, so it builds no instant state and no payload model)."""
        return self.fold()

    @property
    def clean(self) -> bool:
        return not self.differences


def entries_from_topic(
    events: Iterable[Recorded],
) -> tuple[Mapping[int, TimelineEntry], list[Difference]]:
    """The entries the ``TimelineTransition`` events describe, by seq. A redelivered event
    (same entry published twice) counts once; two different events for one seq are a
    ``conflicting`` difference (the first is kept). Events that do not make an entry are
    skipped (the history fold reports them).

    Entries whose payload texts are equal share one payload dict (parsed once): with
    ``SharedPayloads`` the state machine then validates it once too (``rebuild_state``)."""
    replay = TopicReplay(fold=False)
    for event in events:
        replay.feed(event)
    return replay.entries, replay.conflicts


class TopicReplay:
    """The timeline rebuilt from the topic while it is read: ``feed`` each event, then read
    ``entries``, ``conflicts`` and ``state()``.

    The fold takes each entry as soon as every lower seq was fed (events arrive in seq order
    but for redeliveries and appenders that publish out of order), so the decoded records need
    not be kept until the read ends, only the entries (the diff needs them). Entries that
    cannot be folded yet (a seq is missing, or the read began above seq 0) wait and are folded
    in seq order by ``state()``: the fold sees exactly the seq order ``rebuild_state`` gives
    it, so both decide the same (``test_history_replay``).

    The hot path of ``lakewarden replay``: an event that makes a well-formed entry becomes a
    ``LeanEntry`` (no pydantic) and is folded by ``LeanFold``, which decides what the state
    machine decides (``_lean_fold``); ``entries`` builds the ``TimelineEntry`` models when
    they are read."""

    def __init__(self, *, fold: bool = True) -> None:
        self._folds = fold
        self.reset()

    def reset(self) -> None:
        """Forget everything fed (a read that starts over: ``replay_timeline`` after its
        second process found an invalid payload among those it folded as valid)."""
        fold = self._folds
        self._texts = PayloadTexts()
        self.entries = TopicEntries(self._texts)
        self.conflicts: list[Difference] = []
        self._fold = LeanFold(self._texts) if fold else None
        # Read and written by ``MessageFold``, which takes the in-order case inline:
        self.waiting: dict[int, LeanEntry | TimelineEntry] = {}  # fed, not folded yet
        self.next_seq = 0  # the seq the fold takes next

    @property
    def texts(self) -> PayloadTexts:
        """The payload texts parsed and validated so far (shared by entries and fold)."""
        return self._texts

    @property
    def lean_fold(self) -> LeanFold | None:
        """The fold (None: built with ``fold=False``)."""
        return self._fold

    def feed(self, event: Recorded) -> None:
        """Take one event (any kind: only ``TimelineTransition`` makes an entry)."""
        if event[0] != "TimelineTransition":
            return
        entry = _lean_entry(event[1], self._texts)
        if entry is not None:
            self.take(entry)

    def take(self, entry: LeanEntry | TimelineEntry) -> None:
        """Take one entry (``feed`` without the record: for a reader that builds the
        ``LeanEntry`` itself, ``MessageFold``)."""
        seq = entry_seq(entry)
        stored = self.entries.raw
        known = stored.get(seq)
        if known is not None:
            if known != entry:
                self._compare(known, entry)
            return
        stored[seq] = entry
        fold = self._fold
        if fold is None:
            return
        if seq != self.next_seq:
            self.waiting[seq] = entry
            return
        fold.feed(entry)
        waiting = self.waiting
        seq += 1
        while waiting and seq in waiting:
            fold.feed(waiting.pop(seq))
            seq += 1
        self.next_seq = seq

    def _compare(self, known: LeanEntry | TimelineEntry, entry: LeanEntry | TimelineEntry) -> None:
        """A second version of a seq: a ``conflicting`` difference unless the entries agree."""
        texts = self._texts
        try:
            first, second = texts.entry(known), texts.entry(entry)
        except ValueError:  # an UNCHECKED payload that is no JSON: the read starts over
            return
        if first != second:
            fields = ", ".join(_differing(first, second))
            self.conflicts.append(
                Difference(
                    seq=entry_seq(entry),
                    kind="conflicting",
                    detail=f"the topic holds two versions ({fields})",
                )
            )

    def _fold_waiting(self) -> LeanFold:
        if self._fold is None:
            raise RuntimeError("this replay only collects entries")
        for seq in sorted(self.waiting):
            self._fold.feed(self.waiting.pop(seq))
        return self._fold

    def state(self) -> TimelineState:
        """The state machine folded over every entry fed, in seq order.

        Raises: RuntimeError (built with ``fold=False``)."""
        return self._fold_waiting().state()

    def summary(self) -> FoldSummary:
        """``state()``'s instants counted by state, its tail and rejections, without building
        the instants' states and payload models (what ``lakewarden replay`` prints).

        Raises: RuntimeError (built with ``fold=False``)."""
        return self._fold_waiting().summary()


class TopicEntries(Mapping[int, TimelineEntry]):
    """The topic's entries by seq, held as replay read them (``LeanEntry`` mostly); each
    ``TimelineEntry`` is built when it is looked up."""

    def __init__(self, texts: PayloadTexts) -> None:
        self.raw: dict[int, LeanEntry | TimelineEntry] = {}
        self._texts = texts

    def __getitem__(self, seq: int) -> TimelineEntry:
        return self._texts.entry(self.raw[seq])

    def __iter__(self) -> Iterator[int]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)

    def __contains__(self, seq: object) -> bool:
        return seq in self.raw


def read_storage_entries(storage: Storage) -> dict[int, TimelineEntry | str]:
    """Every timeline entry in storage by seq (a malformed one as the reason), holes and all.

    Raises: StorageError.
    """
    found: dict[int, TimelineEntry | str] = {}
    for info in storage.list(TIMELINE_PREFIX):
        seq = seq_of(info.key, TIMELINE_PREFIX)
        if seq is None:
            continue
        data = storage.read(info.key)
        try:
            found[seq] = TimelineEntry.model_validate_json(data)
        except ValidationError as err:
            found[seq] = f"{err.error_count()} validation error(s): {err.errors()[0]['msg']}"
    return found


def diff_timelines(
    topic: Mapping[int, TimelineEntry],
    storage: dict[int, TimelineEntry | str],
    *,
    conflicts: Iterable[Difference] = (),
    state: TimelineState | Callable[[], TimelineState] | None = None,
) -> ReplayReport:
    """Compare the topic's entries with storage's, seq by seq; ``state`` is the fold of the
    topic's entries when the caller has it (or the call that makes it when read:
    ``TopicReplay.state``), else it is folded here when the report's state is read."""
    differences = list(conflicts)
    for seq in sorted(topic.keys() | storage.keys()):
        mine, theirs = topic.get(seq), storage.get(seq)
        if isinstance(theirs, str):
            differences.append(Difference(seq, "malformed", f"storage entry unreadable: {theirs}"))
        elif theirs is None and mine is not None:
            differences.append(Difference(seq, "missing", f"storage lacks {_describe(mine)}"))
        elif mine is None and theirs is not None:
            differences.append(Difference(seq, "extra", f"the topic lacks {_describe(theirs)}"))
        elif mine is not None and theirs is not None and mine != theirs:
            detail = "; ".join(_field_diffs(mine, theirs))
            differences.append(Difference(seq, "different", f"{_describe(theirs)}: {detail}"))
    differences.sort(key=lambda d: d.seq)
    return ReplayReport(
        topic_entries=len(topic),
        storage_entries=len(storage),
        differences=tuple(differences),
        fold=(
            (lambda: rebuild_state(topic))
            if state is None
            else state
            if callable(state)
            else (lambda: state)
        ),
    )


def rebuild_state(entries: Mapping[int, TimelineEntry]) -> TimelineState:
    """The state machine folded over ``entries`` in seq order (illegal ones are rejected and
    reported in ``state.rejected``, as every reader of the log does)."""
    replayer = Replayer(TimelineState(), payloads=SharedPayloads())
    for seq in sorted(entries):
        replayer.feed(entries[seq])
    return replayer.state()


def _lean_entry(record: dict[str, Any], texts: PayloadTexts) -> LeanEntry | TimelineEntry | None:
    """The entry a ``TimelineTransition`` record describes, or None when it does not make one.

    The hot path of replay (one call per event): the Avro schema already guarantees each
    field's type, so when the constraints that Avro cannot express hold too (the checks of
    ``_trusted``, inlined) and the payload is a JSON object, the entry is a ``LeanEntry``
    (for a fast transition with the payload validated: an object then, by construction);
    any other record is left to ``_entry_of``, which builds the entry the validating
    constructor builds, or None."""
    try:
        seq, instant, actor = record["seq"], record["instant"], record["actor"]
        action = _ACTIONS.get(record["action"])
        transition = _TRANSITIONS.get(record["transition"])
        token = record.get("lock_token")
        wall = record["wall_time"]
        text = record.get("payload") or "{}"
        if (
            type(seq) is int
            and seq >= 0
            and type(instant) is str
            and _INSTANT_TIME.fullmatch(instant) is not None
            and type(actor) is str
            and actor
            and action is not None
            and transition is not None
            and (token is None or type(token) is int)
            and type(wall) is int
            and type(text) is str
        ):
            models = texts.models.get(transition)  # a fast transition's: validated once
            model = None if models is None else models.get(text, _UNSEEN)
            if model is _UNSEEN:
                model = texts.model(transition, text)
            if model is not None or type(texts.parsed(text)) is dict:
                return (seq, instant, action, transition, actor, token, wall, text, model)
    except (KeyError, TypeError, ValueError):
        pass
    return _entry_of(record, texts)


def _entry_of(record: dict[str, Any], texts: PayloadTexts) -> TimelineEntry | None:
    """The entry ``record`` describes, or None when it does not make one: without
    pydantic's validation when the constraints Avro cannot express hold (``_trusted``),
    otherwise by the validating constructor, exactly as for any other entry."""
    try:
        payload = texts.parsed(str(record.get("payload") or "{}"))
        trusted = _trusted(record, payload)
        if trusted is not None:
            return trusted
        return TimelineEntry(
            seq=int(record["seq"]),
            instant=str(record["instant"]),
            action=record["action"],
            transition=record["transition"],
            actor=str(record["actor"]),
            lock_token=record.get("lock_token"),
            wall_time_ms=epoch_ms(record["wall_time"]),
            payload=payload,
        )
    except (KeyError, TypeError, ValueError):  # pydantic's ValidationError is a ValueError
        return None


_ACTIONS: dict[str, Action] = {a.value: a for a in Action}
_UNSEEN: Any = object()
_TRANSITIONS: dict[str, Transition] = {t.value: t for t in Transition}
_INSTANT_TIME = re.compile(r"\d{17}")


def _trusted(record: dict[str, Any], payload: object) -> TimelineEntry | None:
    """The entry without re-validation when every constraint of ``TimelineEntry`` holds on
    the decoded record (types by Avro; pattern, lengths, bounds and enums checked here), else
    None. ``test_history_replay`` proves it builds the entry the validator builds.

    Raises: KeyError (a field is absent: not a decoded TimelineTransition)."""
    seq, instant, actor = record["seq"], record["instant"], record["actor"]
    action = _ACTIONS.get(record["action"])
    transition = _TRANSITIONS.get(record["transition"])
    token = record.get("lock_token")
    wall = record["wall_time"]
    if (
        type(seq) is not int
        or seq < 0
        or type(instant) is not str
        or _INSTANT_TIME.fullmatch(instant) is None
        or type(actor) is not str
        or not actor
        or action is None
        or transition is None
        or not (token is None or type(token) is int)
        or not (type(wall) is int or isinstance(wall, datetime))
        or type(payload) is not dict
    ):
        return None
    return construct(
        TimelineEntry,
        {
            "seq": seq,
            "instant": instant,
            "action": action,
            "transition": transition,
            "actor": actor,
            "lock_token": token,
            "wall_time_ms": epoch_ms(wall),
            "payload": payload,
        },
    )


def _describe(entry: TimelineEntry) -> str:
    return f"{entry.transition} of {entry.action} {entry.instant} by {entry.actor}"


def _differing(a: TimelineEntry, b: TimelineEntry) -> list[str]:
    return [name for name in _COMPARED if getattr(a, name) != getattr(b, name)]


def _field_diffs(topic: TimelineEntry, storage: TimelineEntry) -> list[str]:
    return [
        f"{name} is {getattr(storage, name)!r} in storage, {getattr(topic, name)!r} on the topic"
        for name in _differing(topic, storage)
    ]
