"""Reading and folding many events at once: the cyclic garbage collector paused."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def batch_mode() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a command reads and folds a table's
    events, and restore it after.

    The read keeps every decoded event alive until the fold is done, so each full collection
    walks a heap that grows with the read: on 30k events that was 35-45% of the time of
    ``explain`` and ``replay``. Those records (dicts, lists, frozen dataclasses, pydantic
    entries) hold no reference cycles, so reference counting frees them without the collector.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            _promote_young()
            gc.enable()


def _promote_young() -> None:
    """Move every tracked object to the oldest generation without traversing them.

    With the collector paused, everything the read and fold kept (entries, instant states,
    payload models: a few million objects after a million events) is still in the youngest
    generation, so the first collection after ``gc.enable()`` would traverse it all, only to
    promote it (a tenth of a replay's time). ``freeze`` then ``unfreeze`` moves the objects
    to the oldest generation in constant time; a later full collection sees them as usual.
    Skipped when the process froze objects itself (``unfreeze`` would release them too)."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()
