"""What the runner reads back at the end of a run, as plain data for the checkers: a table's
rows, raw timeline entries, files and pending instants; its error table; its events on the
timeline topic. Timeline entries and error records are parsed as plain JSON, not by the code
under test.
"""

from __future__ import annotations

import json
from typing import Any

from _checkers import TableObservation
from _event_checkers import COMPARED

from lakewarden.api.table import Table
from lakewarden.settings import Settings
from lakewarden.storage import Storage, open_storage
from lakewarden.table.config import load_config
from lakewarden.table.coordinator import EmbeddedCoordinator

__all__ = ["error_rows", "observe_table", "quiet", "raw_entries", "timeline_events"]


def observe_table(table: Table) -> TableObservation:
    rows = table.read(with_meta=True).select(["key", "v", "_lw_commit_time"]).to_pylist()
    entries = raw_entries(table.storage)
    state = table.state()
    pending = [i for i in state.pending() if i.action in ("commit", "deltacommit")]
    snapshot = table.snapshot()
    return TableObservation(
        table_id=table.table_id,
        visible_files=[path for s in snapshot.slices.values() for path in s.paths],
        rows=[{"key": r["key"], "v": r["v"], "commit_time": r["_lw_commit_time"]} for r in rows],
        entries=entries,
        rejected_seqs={r.seq for r in state.rejected},
        pending=[i.instant for i in pending if i.state != "requested"],
        requested=[i.instant for i in pending if i.state == "requested"],
        data_keys=[o.key for o in table.storage.list("") if not o.key.startswith(".lakewarden/")],
    )


def raw_entries(storage: Storage) -> list[dict[str, Any]]:
    """The timeline entries in storage, parsed as plain JSON (not by the code under test)."""
    entries = []
    for obj in storage.list(".lakewarden/timeline/"):
        name = obj.key.rsplit("/", 1)[1]
        if "/_" in obj.key or not name.endswith(".json") or not name[:-5].isdigit():
            continue
        raw = json.loads(storage.read(obj.key))
        entries.append(
            {
                "seq": int(name[:-5]),
                "instant": raw.get("instant"),
                "action": raw.get("action"),
                "transition": raw.get("transition"),
                "actor": raw.get("actor", ""),
                "lock_token": raw.get("lock_token"),
            }
        )
    return entries


def quiet(table: Table) -> bool:
    """No ingestion instant pending (inflight or ``requested``) and no file of a rolled-back
    one left."""
    state = table.state()
    if any(i.action in ("commit", "deltacommit") for i in state.pending()):
        return False
    rolled_back = [i.instant for i in state.instants.values() if i.state == "rolled_back"]
    return not any(
        instant in o.key
        for o in table.storage.list("")
        if not o.key.startswith(".lakewarden/")
        for instant in rolled_back
    )


def error_rows(uri: str, settings: Settings) -> list[dict[str, Any]]:
    """The error table's rows as ``v`` (of the bad row) and ``instant``; none while the sink
    has not created it."""
    from lakewarden.table.config import NotATableError

    try:
        storage = open_storage(uri, settings)
        table = Table(storage, load_config(storage), coordinator=EmbeddedCoordinator())
        rows = table.read(columns=["record", "source_instant"]).to_pylist()
    except NotATableError:
        return []
    return [
        {"v": json.loads(r["record"] or "{}").get("v"), "instant": r["source_instant"]}
        for r in rows
    ]


def timeline_events(settings: Settings, table_id: str) -> list[dict[str, Any]]:
    """The table's ``TimelineTransition`` events on the timeline topic, as plain dicts."""
    from lakewarden.events.topics import TIMELINE
    from lakewarden.history.model import Recorded
    from lakewarden.history.reader import read_table_events

    return [
        {name: item.record.get(name) for name in ("seq", *COMPARED)}
        for item in read_table_events(settings, table_id, topics=(TIMELINE,), timeout_s=120)
        if isinstance(item, Recorded) and item.name == "TimelineTransition"
    ]
