"""TimelinePublisher: an appended entry becomes a TimelineTransition; a failure never raises."""

from __future__ import annotations

import json
from typing import Any

from lakewarden.clients.timeline_events import TimelinePublisher
from lakewarden.events import EventDeliveryError, default_codec
from lakewarden.settings import Settings
from lakewarden.table.instant import Action, Transition
from lakewarden.table.timeline_state import TimelineEntry

ENTRY = TimelineEntry(
    seq=4,
    instant="20251123120000000",
    action=Action.COMMIT,
    transition=Transition.COMPLETED,
    actor="writer-1",
    lock_token=9,
    wall_time_ms=1_763_900_000_123,
    payload={"operation": "insert", "write_stats": []},
)


class _Producer:
    def __init__(self, *, fail: bool = False) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.fail = fail

    def send(self, event: str, record: dict[str, Any], **_: object) -> None:
        self.sent.append((event, record))

    def flush(self, timeout_s: float | None = None) -> None:
        if self.fail:
            raise EventDeliveryError([("lakewarden.timeline", "broker down")], 1)


def test_an_entry_is_published_as_its_transition_event() -> None:
    producer = _Producer()
    publisher = TimelinePublisher(Settings(), producer=producer)  # type: ignore[arg-type]

    publisher.publish("table-1", ENTRY)

    [(name, record)] = producer.sent
    decoded = default_codec().decode(default_codec().encode(name, record)).record
    assert decoded["envelope"]["table_id"] == "table-1"
    assert (decoded["seq"], decoded["transition"], decoded["actor"]) == (4, "completed", "writer-1")
    assert json.loads(decoded["payload"]) == ENTRY.payload


def test_a_lost_announcement_is_counted_not_raised() -> None:
    publisher = TimelinePublisher(Settings(), producer=_Producer(fail=True))  # type: ignore[arg-type]

    publisher.publish("table-1", ENTRY)

    assert publisher.failed == 1
