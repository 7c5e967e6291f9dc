"""What ``dev up`` started, persisted in ``<state>/stack.json`` so ``dev down`` stops exactly that.

The record is rewritten atomically after every part that starts, so a crash half-way through
``up`` still leaves a record ``down`` can act on. Each part is identified by its pid and its
process start time, so a pid the kernel has since reused for another program is never signalled.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from lakewarden.devstack import processes
from lakewarden.devstack.errors import DevStackError

STACK_FILE = "stack.json"


class PartRecord(BaseModel):
    """One process the stack started."""

    model_config = ConfigDict(frozen=True)

    name: str
    kind: Literal["kafka", "s3", "service"]
    pid: int
    start_ticks: int | None
    pid_file: Path
    log_file: Path
    health_port: int
    ports: dict[str, int]

    def is_ours_and_alive(self) -> bool:
        """True while the recorded process runs (same pid and the same start time)."""
        if not processes.pid_alive(self.pid):
            return False
        return self.start_ticks is None or processes.process_start_ticks(self.pid) == (
            self.start_ticks
        )


class StackRecord(BaseModel):
    """Every part one state folder's stack runs, in start order, and how to reach them."""

    model_config = ConfigDict(frozen=True)

    bootstrap_servers: str | None = None
    s3_endpoint_url: str | None = None
    parts: tuple[PartRecord, ...] = ()

    def part(self, name: str) -> PartRecord | None:
        return next((part for part in self.parts if part.name == name), None)

    def with_part(self, record: PartRecord) -> StackRecord:
        kept = tuple(part for part in self.parts if part.name != record.name)
        return self.model_copy(update={"parts": (*kept, record)})

    def without_part(self, name: str) -> StackRecord:
        return self.model_copy(
            update={"parts": tuple(part for part in self.parts if part.name != name)}
        )


def record_path(state_dir: Path) -> Path:
    return state_dir / STACK_FILE


def load(state_dir: Path) -> StackRecord:
    """The stack record of ``state_dir``; an empty one when there is none.

    Raises: DevStackError: the record is not a stack record (edited or truncated by hand).
    """
    path = record_path(state_dir)
    if not path.exists():
        return StackRecord()
    try:
        return StackRecord.model_validate_json(path.read_text())
    except ValidationError as err:
        raise DevStackError(
            f"{path} is not a stack record ({err.error_count()} problems, first: "
            f"{err.errors()[0]['msg']}). Help: stop what it started by hand if anything "
            "still runs, then remove the file."
        ) from err


def save(state_dir: Path, record: StackRecord) -> None:
    """Replace the record atomically; an empty record removes the file."""
    path = record_path(state_dir)
    if not record.parts:
        path.unlink(missing_ok=True)
        return
    state_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(record.model_dump_json(indent=2))
    tmp.replace(path)
