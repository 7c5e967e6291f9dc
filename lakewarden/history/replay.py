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

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import ValidationError

from lakewarden.history.fold import epoch_ms
from lakewarden.history.model import Recorded
from lakewarden.storage import Storage
from lakewarden.table._frozen import construct
from lakewarden.table._payloads import SHARED_PAYLOADS_LIMIT
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


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """The rebuilt timeline (``state``: the state machine folded over the topic's entries)
    and every difference from storage, in seq order."""

    topic_entries: int
    storage_entries: int
    differences: tuple[Difference, ...]
    state: TimelineState

    @property
    def clean(self) -> bool:
        return not self.differences


def entries_from_topic(
    events: Iterable[Recorded],
) -> tuple[dict[int, TimelineEntry], list[Difference]]:
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

    The state machine folds each entry as soon as every lower seq was fed (events arrive in
    seq order but for redeliveries and appenders that publish out of order), so the decoded
    records need not be kept until the read ends, only the entries (the diff needs them).
    Entries that cannot be folded yet (a seq is missing, or the read began above seq 0) wait
    and are folded in seq order by ``state()``: the fold sees exactly the seq order
    ``rebuild_state`` gives it, so both decide the same (``test_history_replay``)."""

    def __init__(self, *, fold: bool = True) -> None:
        self.entries: dict[int, TimelineEntry] = {}
        self.conflicts: list[Difference] = []
        self._parsed: dict[str, object] = {}
        self._fold = fold
        self._replayer = Replayer(TimelineState(), payloads=SharedPayloads())
        self._waiting: dict[int, TimelineEntry] = {}
        self._next = 0  # the seq the fold takes next

    def feed(self, event: Recorded) -> None:
        """Take one event (any kind: only ``TimelineTransition`` makes an entry)."""
        if event.name != "TimelineTransition":
            return
        entry = _entry_of(event, self._parsed)
        if entry is None:
            return
        seq = entry.seq
        known = self.entries.get(seq)
        if known is not None:
            if known != entry:
                fields = ", ".join(_differing(known, entry))
                self.conflicts.append(
                    Difference(seq, "conflicting", f"the topic holds two versions ({fields})")
                )
            return
        self.entries[seq] = entry
        if not self._fold:
            return
        if seq != self._next:
            self._waiting[seq] = entry
            return
        feed = self._replayer.feed
        feed(entry)
        waiting = self._waiting
        seq += 1
        while waiting and seq in waiting:
            feed(waiting.pop(seq))
            seq += 1
        self._next = seq

    def state(self) -> TimelineState:
        """The state machine folded over every entry fed, in seq order.

        Raises: RuntimeError (built with ``fold=False``)."""
        if not self._fold:
            raise RuntimeError("this replay only collects entries")
        for seq in sorted(self._waiting):
            self._replayer.feed(self._waiting.pop(seq))
        return self._replayer.state()


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
    topic: dict[int, TimelineEntry],
    storage: dict[int, TimelineEntry | str],
    *,
    conflicts: Iterable[Difference] = (),
    state: TimelineState | None = None,
) -> ReplayReport:
    """Compare the topic's entries with storage's, seq by seq; ``state`` is the fold of the
    topic's entries when the caller has it (``TopicReplay.state()``), else it is folded here."""
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
        state=rebuild_state(topic) if state is None else state,
    )


def rebuild_state(entries: dict[int, TimelineEntry]) -> TimelineState:
    """The state machine folded over ``entries`` in seq order (illegal ones are rejected and
    reported in ``state.rejected``, as every reader of the log does)."""
    replayer = Replayer(TimelineState(), payloads=SharedPayloads())
    for seq in sorted(entries):
        replayer.feed(entries[seq])
    return replayer.state()


def _entry_of(event: Recorded, parsed: dict[str, object]) -> TimelineEntry | None:
    """The entry a ``TimelineTransition`` event describes, or None when it does not make one.

    The hot path of replay (one call per event): the Avro schema already guarantees each
    field's type, so the entry is built without pydantic's validation when the constraints
    that Avro cannot express hold (``_trusted``); otherwise the validating constructor
    decides, exactly as for any other entry."""
    record = event.record
    try:
        payload = _payload(str(record.get("payload") or "{}"), parsed)
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


def _payload(text: str, parsed: dict[str, object]) -> object:
    """``json.loads(text)``, the same object for an equal text seen recently (``parsed``).

    Raises: ValueError (not JSON)."""
    payload = parsed.get(text)
    if payload is None:
        payload = json.loads(text)
        if len(parsed) >= SHARED_PAYLOADS_LIMIT:  # payloads that never repeat: bounded
            parsed.clear()
        parsed[text] = payload
    return payload


_ACTIONS: dict[str, Action] = {a.value: a for a in Action}
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
