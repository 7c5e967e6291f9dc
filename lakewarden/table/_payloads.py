"""How the state machine's rules read entry payloads, and the verdict on an illegal entry.

Every rule reads its entry's payload through a ``PayloadParser``. ``parse_payload`` validates
it with pydantic, once per entry: what a writer does for the one entry it appends.
``SharedPayloads`` is for folds over many entries (replay of the timeline topic): the same
verdict for the same payload, validated once. A payload is the same when it is the very same
dict object, which ``history.replay.entries_from_topic`` arranges for equal payload texts; the
validated models are frozen, so sharing one between instants is safe, and the verdict of a
payload depends on nothing but the payload, the model and the transition named in a
rejection, which together form the key. So a fold through ``SharedPayloads`` decides exactly
what a fold through ``parse_payload`` decides (``tests/unit/table/test_replay_fold.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar, cast

from pydantic import BaseModel, ValidationError

from lakewarden.table.instant import Transition
from lakewarden.table.timeline_state import TimelineEntry

_M = TypeVar("_M", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Rejected:
    """The verdict on an illegal entry."""

    reason: str


class PayloadParser(Protocol):
    """How a rule reads an entry's payload as ``model``."""

    def __call__(self, model: type[_M], entry: TimelineEntry) -> _M | Rejected: ...


def parse_payload(model: type[_M], entry: TimelineEntry) -> _M | Rejected:
    """``entry``'s payload validated as ``model``, or why it is malformed."""
    try:
        return model.model_validate(entry.payload)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'payload'}: {e['msg']}" for e in err.errors()
        )
        return Rejected(f"malformed {entry.transition} payload ({model.__name__}): {problems}")


# Bounds the memory of a fold over payloads that never repeat; repeated ones stay warm.
SHARED_PAYLOADS_LIMIT: Final = 4096


class SharedPayloads:
    """``parse_payload`` that validates a payload object once per (model, transition).

    Holds each payload it keys by identity, so an id is never reused while remembered.
    Not thread-safe; one per fold.
    """

    def __init__(self, limit: int = SHARED_PAYLOADS_LIMIT) -> None:
        self._limit = limit
        self._seen: dict[tuple[type[BaseModel], Transition, int], tuple[object, Any]] = {}

    def __call__(self, model: type[_M], entry: TimelineEntry) -> _M | Rejected:
        payload = entry.payload
        key = (model, entry.transition, id(payload))
        hit = self._seen.get(key)
        if hit is not None and hit[0] is payload:
            return cast("_M | Rejected", hit[1])
        verdict = parse_payload(model, entry)
        if len(self._seen) >= self._limit:
            self._seen.clear()
        self._seen[key] = (payload, verdict)
        return verdict


__all__ = ["PayloadParser", "Rejected", "SharedPayloads", "parse_payload"]
