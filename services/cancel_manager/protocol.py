"""Between Avro records and cancel-manager's values: parsing ``CancelRequest`` and
``HeartbeatExpired``, building ``CancelResult``.

``InvalidEvent`` carries the dead-letter reason (``unexpected_event``, ``key_mismatch``,
``invalid_request``); the worker only ever sees a well-formed ``CancelCommand``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from lakewarden.events import InvalidEvent, make_event
from lakewarden.table.instant import Instant, InvalidInstantError
from lakewarden.table.timeline import TimelineEntry

__all__ = [
    "CancelCommand",
    "Expiry",
    "Outcome",
    "parse_expiry",
    "parse_request",
    "refusal_for",
    "result_record",
]

Kind = Literal["request", "execute"]
# CancelResult.outcome (v1, coarse) for each status (v2, precise).
_COARSE: dict[str, str] = {
    "accepted": "cancel_requested",
    "already_requested": "noop",
    "aborted": "aborted",
    "already_aborted": "noop",
}


@dataclass(frozen=True)
class CancelCommand:
    """A valid ``CancelRequest``."""

    table_id: str
    table_uri: str | None
    request_id: str
    instant: str
    kind: Kind
    requester: str
    reason: str


@dataclass(frozen=True)
class Expiry:
    """A ``HeartbeatExpired``: the executor of ``instant`` was declared dead."""

    table_id: str
    instant: str
    owner: str


@dataclass(frozen=True)
class Outcome:
    """How a command ended. ``status`` is one of ``CancelResult.status``'s values."""

    status: str
    reason: str | None = None
    error_type: str | None = None
    entries: tuple[TimelineEntry, ...] = ()  # appended by the service, to publish

    @property
    def coarse(self) -> str:
        return _COARSE.get(self.status, "refused")


def _table_id(name: str, expected: str, record: dict[str, Any], key: bytes | None) -> str:
    if name != expected:
        raise InvalidEvent("unexpected_event", f"a {name} event where {expected} was expected")
    table_id = str(record["envelope"]["table_id"])
    if not table_id or key != table_id.encode():
        raise InvalidEvent("key_mismatch", f"message key {key!r} is not the table id {table_id!r}")
    return table_id


def parse_request(name: str, record: dict[str, Any], *, key: bytes | None) -> CancelCommand:
    """The command a decoded ``CancelRequest`` asks for.

    Raises: InvalidEvent (``unexpected_event``, ``key_mismatch``, ``invalid_request``)."""
    table_id = _table_id(name, "CancelRequest", record, key)
    if not record["request_id"]:
        raise InvalidEvent("invalid_request", "request_id is empty: the result echoes it")
    try:
        Instant.parse(record["instant"])
    except InvalidInstantError as err:
        raise InvalidEvent("invalid_request", f"instant: {err}") from err
    if not record["requester"]:
        raise InvalidEvent("invalid_request", "requester is empty: say who asks")
    kind = record["kind"]
    if kind not in ("request", "execute"):  # the enum makes this unreachable; belt and braces
        raise InvalidEvent("invalid_request", f"kind {kind!r} is neither request nor execute")
    return CancelCommand(
        table_id=table_id,
        table_uri=record.get("table_uri") or None,
        request_id=record["request_id"],
        instant=record["instant"],
        kind=kind,
        requester=record["requester"],
        reason=record.get("reason") or "no reason given",
    )


def parse_expiry(name: str, record: dict[str, Any], *, key: bytes | None) -> Expiry:
    """Raises: InvalidEvent."""
    table_id = _table_id(name, "HeartbeatExpired", record, key)
    return Expiry(table_id, str(record["instant"]), str(record["owner"]))


def result_record(command: CancelCommand, outcome: Outcome, *, producer_id: str) -> dict[str, Any]:
    """The ``CancelResult`` answering ``command``."""
    return make_event(
        "CancelResult",
        table_id=command.table_id,
        producer_id=producer_id,
        request_id=command.request_id,
        instant=command.instant,
        outcome=outcome.coarse,
        reason=outcome.reason,
        status=outcome.status,
        error_type=outcome.error_type,
    )


def refusal_for(
    record: dict[str, Any], err: InvalidEvent, *, producer_id: str
) -> dict[str, Any] | None:
    """A ``CancelResult`` refusing an invalid request that names its table and request id
    (so its sender does not wait for a timeout); None when it cannot be addressed."""
    envelope = record.get("envelope") or {}
    table_id, request_id = envelope.get("table_id"), record.get("request_id")
    if not table_id or not request_id or err.reason != "invalid_request":
        return None
    return make_event(
        "CancelResult",
        table_id=str(table_id),
        producer_id=producer_id,
        request_id=str(request_id),
        instant=str(record.get("instant") or ""),
        outcome="refused",
        reason=err.detail,
        status="invalid_request",
        error_type=None,
    )
