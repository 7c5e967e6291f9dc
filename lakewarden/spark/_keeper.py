"""A heartbeat that outlives the call that started it.

PySpark runs ``DataSource.writer()`` (where a plain-format write opens its instant) in a
planner worker process and ``commit()`` in another, so no ``with`` block can span the job.
``keep_alive`` starts a daemon thread in the planner process that holds
``coordinator.heartbeat(...)`` until the timeline shows the instant terminal (completed,
rolled back, aborted) or ``max_s`` passed; the process is a reused Python worker, so the thread
keeps running while the job does. If that process dies, the heartbeat stops and the instant
is declared dead after the tolerance window, which is exactly what should happen to a write
whose driver died. ``lakewarden.spark.write`` does not need this: it holds the heartbeat in
the driver for the whole job.
"""

from __future__ import annotations

import logging
import threading
import time

from lakewarden.table.coordinator import Heartbeating
from lakewarden.table.instant import TERMINAL_STATES
from lakewarden.table.timeline import Timeline

log = logging.getLogger("lakewarden.spark")

POLL_S = 2.0
MAX_S = 24 * 3600.0


def keep_alive(
    timeline: Timeline,
    coordinator: Heartbeating,
    table_id: str,
    instant: str,
    owner: str,
    *,
    poll_s: float = POLL_S,
    max_s: float = MAX_S,
) -> threading.Thread:
    """Heartbeat ``instant`` from a daemon thread until it is terminal (or ``max_s``)."""

    def run() -> None:
        deadline = time.monotonic() + max_s
        try:
            with coordinator.heartbeat(table_id, instant, owner):
                while time.monotonic() < deadline:
                    state = timeline.load().get(instant)
                    if state is None or state.state in TERMINAL_STATES:
                        return
                    time.sleep(poll_s)
        except Exception:  # noqa: BLE001 - a dead keeper must not take the worker down
            log.exception("heartbeat keeper of instant %s stopped", instant)

    thread = threading.Thread(target=run, name=f"lw-heartbeat-{instant}", daemon=True)
    thread.start()
    return thread
