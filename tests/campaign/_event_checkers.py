"""The storage timeline against the event timeline (``lakewarden.timeline``): a pure checker.

Every appender of a timeline entry announces it as a ``TimelineTransition`` event after the
entry is in storage (``lakewarden.clients.timeline_events``), the replay source of ``lakewarden
replay``. The campaign compares, at the end of each run, the raw storage entries (plain JSON)
with the events of the table read back from the topic (decoded Avro, as plain dicts):

- ``timeline_event_without_entry``: an event names an entry storage does not have (an
  announcement is made only after the append succeeded, so this is a lie on the topic);
- ``timeline_event_differs``: an event and the storage entry of its seq disagree on the
  instant, action, transition, actor or lock token;
- ``timeline_event_conflicting``: two different events for one seq;
- ``timeline_event_missing``: an entry appended by a process nothing disturbed has no event.

An announcement is best effort by design (it never fails a write whose entry is in storage),
so an entry may lack its event when its appender was killed before announcing, when a lost
storage reply hid the append from it, or when the broker was restarted: only entries of
*undisturbed* appenders (``strict_actors``, which the runner computes from the fault
schedule) count as missing; the others are counted (``unannounced``), not failed.
"""

from __future__ import annotations

from typing import Any

from _checkers import Violation

__all__ = ["COMPARED", "check_event_timeline"]

COMPARED = ("instant", "action", "transition", "actor", "lock_token")


def check_event_timeline(
    entries: list[dict[str, Any]],
    events: list[dict[str, Any]],
    *,
    strict_actors: set[str],
) -> tuple[list[Violation], int]:
    """The violations, and how many entries lack their event where that is allowed."""
    stored = {entry["seq"]: entry for entry in entries}
    found: list[Violation] = []
    announced: dict[int, dict[str, Any]] = {}
    for event in events:
        seq = event["seq"]
        first = announced.setdefault(seq, event)
        if _fields(first) != _fields(event):
            found.append(
                Violation(
                    "timeline_event_conflicting",
                    f"seq {seq}: {_fields(first)} and {_fields(event)}",
                )
            )
    for seq, event in sorted(announced.items()):
        entry = stored.get(seq)
        if entry is None:
            found.append(Violation("timeline_event_without_entry", f"seq {seq}: {_fields(event)}"))
        elif _fields(entry) != _fields(event):
            differing = [f for f in COMPARED if entry.get(f) != event.get(f)]
            found.append(
                Violation(
                    "timeline_event_differs",
                    f"seq {seq}: {differing}: storage {_fields(entry)}, topic {_fields(event)}",
                )
            )
    unannounced = 0
    for seq, entry in sorted(stored.items()):
        if seq in announced:
            continue
        if entry.get("actor") in strict_actors:
            found.append(
                Violation(
                    "timeline_event_missing",
                    f"seq {seq} ({entry.get('transition')} of {entry.get('instant')} by "
                    f"{entry.get('actor')}) was never announced",
                )
            )
        else:
            unannounced += 1
    return found, unannounced


def _fields(item: dict[str, Any]) -> dict[str, Any]:
    return {name: item.get(name) for name in COMPARED}
