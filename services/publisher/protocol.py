"""From events to publishing work. ``InvalidEvent`` carries the dead-letter reason of a
decodable but unusable event (``unexpected_event``, ``key_mismatch``, ``invalid_request``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lakewarden.events import InvalidEvent


@dataclass(frozen=True)
class Trigger:
    """A reason to publish ``table_id`` (a registration carries the table's URI)."""

    table_id: str
    why: str
    table_uri: str | None = None


def parse_event(name: str, record: dict[str, Any], *, key: bytes | None) -> Trigger | None:
    """The work an event asks for; None when it asks for none.

    Raises: InvalidEvent."""
    if name not in ("CleanRequest", "TimelineTransition"):
        raise InvalidEvent("unexpected_event", f"a {name} event on a publisher topic")
    table_id = str(record["envelope"]["table_id"])
    if not table_id or key != table_id.encode():
        raise InvalidEvent("key_mismatch", f"message key {key!r} is not the table id {table_id!r}")
    if name == "TimelineTransition":
        if record["transition"] != "completed":
            return None
        return Trigger(table_id, f"{record['action']} {record['instant']} completed")
    if not record["table_uri"]:
        raise InvalidEvent("invalid_request", "table_uri is empty: the table cannot be opened")
    return Trigger(table_id, "registered", table_uri=record["table_uri"])
