"""Delta checkpoints: not written yet (``checkpoint_due`` is always False)."""

from __future__ import annotations

from lakewarden.storage import Storage
from lakewarden.table.config import TableConfig


def checkpoint_due(config: TableConfig, version: int) -> bool:
    return False


def write_checkpoint(storage: Storage, config: TableConfig, version: int) -> None:
    return None
