"""What every table-service step needs about its table (built by ``Table``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lakewarden.storage import Storage
from lakewarden.table.config import TableConfig
from lakewarden.table.coordinator import Coordinator, Lease, LeaseLostError
from lakewarden.table.instant import Action, Transition
from lakewarden.table.timeline import Timeline
from lakewarden.table.timeline_state import EntryDraft

__all__ = ["ServiceContext"]


@dataclass(frozen=True)
class ServiceContext:
    """A table's storage, config, timeline and coordinator, who acts (the actor id is
    written into every entry and heartbeat) and the wall clock claim marks are judged by."""

    storage: Storage
    config: TableConfig
    timeline: Timeline
    coordinator: Coordinator
    actor: str
    lock_ttl_s: float = 30.0
    lock_wait_s: float = 30.0
    # Wall time (epoch ms) for claim marks and their age: tests pass a clock they move.
    wall_ms: Callable[[], int] = field(default=lambda: time.time_ns() // 1_000_000)

    @property
    def table_id(self) -> str:
        return self.config.table_id

    def draft(
        self,
        lease: Lease,
        instant: str,
        action: Action,
        transition: Transition,
        payload: dict[str, object],
    ) -> EntryDraft:
        """An entry to append while holding ``lease``.

        Raises: LeaseLostError (nothing appended; retry the step)."""
        if lease.lost:
            raise LeaseLostError(
                f"the lease on table {self.table_id} (token {lease.token}) was lost before "
                f"{transition} of {instant} could be appended; nothing was appended. Help: "
                "retry the step; it takes the lock again and re-validates.",
                table=self.table_id,
                instant=instant,
            )
        return EntryDraft(
            instant=instant,
            action=action,
            transition=transition,
            actor=self.actor,
            lock_token=lease.token,
            wall_time_ms=time.time_ns() // 1_000_000,
            payload=dict(payload),
        )
