"""The coordinator is the sum of a few roles, and code that needs one role takes only it.

Every public method of ``Coordinator`` belongs to exactly one role (or is the coordinator's
own: ``job_commits``, ``connect``, ``close``), so a new method has to say which role it
extends; and the functions typed with one role run with an object that implements only that
role.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lakewarden.storage.local import LocalStorage
from lakewarden.table.clean.rollback import failed_writes
from lakewarden.table.coordinator import (
    Coordinator,
    ExecutorLiveness,
    Heartbeating,
    Liveness,
    TableLock,
    TimelineAudit,
)
from lakewarden.table.death import verdict
from lakewarden.table.timeline_state import TimelineState

ROLES = (TableLock, Heartbeating, ExecutorLiveness, TimelineAudit)
OWN = {"job_commits", "connect", "close"}


def _public(cls: type) -> set[str]:
    return {
        name
        for name, _ in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_") and name in vars(cls)
    }


def test_every_method_of_the_coordinator_belongs_to_one_role() -> None:
    owners: dict[str, list[str]] = {}
    for role in ROLES:
        for name in _public(role):
            owners.setdefault(name, []).append(role.__name__)
    assert all(len(roles) == 1 for roles in owners.values()), owners
    every = {n for c in Coordinator.__mro__ if c is not object for n in _public(c)}
    assert every == set(owners) | OWN
    assert _public(Coordinator) == OWN
    assert all(issubclass(Coordinator, role) for role in ROLES)


class _OnlyLiveness(ExecutorLiveness):
    """A liveness view and nothing else: no lock, no heartbeats, no announcements."""

    def __init__(self, dead: set[str]) -> None:
        self.dead = dead

    def liveness(self, table_id: str, instant: str) -> Liveness:
        return Liveness.DEAD if instant in self.dead else Liveness.UNKNOWN

    def executor_of(self, table_id: str, instant: str) -> str | None:
        return "executor-1" if instant in self.dead else None


def test_the_death_rule_needs_only_a_liveness_view(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    view = _OnlyLiveness({"20260101000000000"})
    found = verdict(view, storage, "t1", "20260101000000000", now_ms=0, plan=False)
    assert found.dead, found.reason
    unknown = verdict(view, storage, "t1", "20260101000000001", now_ms=0, plan=False)
    assert not unknown.dead
    assert failed_writes(TimelineState(), view, "t1") == []


class _OnlyHeartbeats(Heartbeating):
    def __init__(self) -> None:
        self.beats: list[str] = []

    @contextmanager
    def heartbeat(self, table_id: str, instant: str, owner: str) -> Iterator[None]:
        self.beats.append(instant)
        yield


def test_the_heartbeat_role_alone_beats() -> None:
    beats = _OnlyHeartbeats()
    with beats.heartbeat("t1", "20260101000000000", "me"):
        beats.check_heartbeat("t1", "20260101000000000")  # nothing delivered: never lost
    assert beats.beats == ["20260101000000000"]
