"""From events to cleaning work: which events make a table worth cleaning, and how.

Parsing is where a decodable but unusable event is caught: ``InvalidEvent`` carries the
dead-letter reason (``unexpected_event``, ``key_mismatch``, ``invalid_request``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from lakewarden.events import InvalidEvent
from lakewarden.table import CleanPolicy, InvalidCleanPolicyError

# Transitions after which a table has garbage (or a failed write) to clean. Requested and
# inflight entries leave none; the cleaner's own clean and rollback entries neither.
GARBAGE_TRANSITIONS: Final = frozenset({"completed", "rolled_back", "aborted", "cancel_requested"})
_OWN_ACTIONS: Final = frozenset({"clean", "rollback"})


@dataclass(frozen=True)
class Trigger:
    """A reason to clean ``table_id``: a request (with the table's URI), a transition, a death."""

    table_id: str
    why: str
    table_uri: str | None = None
    dead: tuple[str, ...] = ()
    policy: str | None = None
    delete_orphans: bool = False


def _table_id(record: dict[str, Any], key: bytes | None) -> str:
    table_id = str(record["envelope"]["table_id"])
    if not table_id or key != table_id.encode():
        raise InvalidEvent("key_mismatch", f"message key {key!r} is not the table id {table_id!r}")
    return table_id


def parse_event(name: str, record: dict[str, Any], *, key: bytes | None) -> Trigger | None:
    """The work an event asks for; None when it leaves nothing to clean.

    Raises: InvalidEvent."""
    if name not in ("CleanRequest", "TimelineTransition", "HeartbeatExpired"):
        raise InvalidEvent("unexpected_event", f"a {name} event on a cleaner topic")
    table_id = _table_id(record, key)
    if name == "HeartbeatExpired":
        return Trigger(
            table_id, f"heartbeat of {record['instant']} expired", dead=(record["instant"],)
        )
    if name == "TimelineTransition":
        if record["transition"] not in GARBAGE_TRANSITIONS or record["action"] in _OWN_ACTIONS:
            return None
        return Trigger(table_id, f"{record['action']} {record['instant']} {record['transition']}")
    if not record["table_uri"]:
        raise InvalidEvent(
            "invalid_request", "table_uri is empty: the cleaner opens the table from it"
        )
    policy = record["policy"]
    if policy:
        try:
            CleanPolicy.parse(policy)
        except InvalidCleanPolicyError as err:
            raise InvalidEvent("invalid_request", str(err)) from err
    who = record["requested_by"] or record["envelope"]["producer_id"]
    return Trigger(
        table_id,
        f"requested by {who}",
        table_uri=record["table_uri"],
        policy=policy or None,
        delete_orphans=bool(record["delete_orphans"]),
    )
