"""Test hooks of job-committer, from the environment (never set in production).

``LAKEWARDEN_JOB_COMMITTER_CRASH_AT=<event>:<stage>`` makes the process kill itself with
SIGKILL (no cleanup at all, as ``kill -9``) when the job commit reaches ``stage``:

- a committer stage, ``start`` or ``end``: ``end:job_stage_rename_files``,
  ``start:job_stage_save_success_marker``, ...;
- a step of ``commit_instant`` (``start`` only): ``start:check_statistics``,
  ``start:complete_instant``;
- a step of the service: ``start:publish_result`` (the instant is completed or rolled back,
  its answer not yet sent).

``LAKEWARDEN_JOB_COMMITTER_CRASH_ONCE=<path>``: crash only if ``path`` does not exist, and
create it first, so the restarted process gets past the same point.
``LAKEWARDEN_JOB_COMMITTER_PAUSE_S=<seconds>``: sleep that long at the same point instead of
crashing (so a test can kill the process from outside while it is there).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

CRASH_AT = "LAKEWARDEN_JOB_COMMITTER_CRASH_AT"
CRASH_ONCE = "LAKEWARDEN_JOB_COMMITTER_CRASH_ONCE"
PAUSE_S = "LAKEWARDEN_JOB_COMMITTER_PAUSE_S"


def crash_hook_from_env() -> Callable[[str, str], None] | None:
    """The hook the environment asks for, or None (the normal case)."""
    where = os.environ.get(CRASH_AT)
    if not where:
        return None
    once = os.environ.get(CRASH_ONCE)
    pause_s = float(os.environ.get(PAUSE_S) or 0)

    def hook(event: str, stage: str) -> None:
        if f"{event}:{stage}" != where:
            return
        if once is not None:
            marker = Path(once)
            if marker.exists():
                return
            marker.write_text(f"{os.getpid()}\n")
        if pause_s > 0:
            log.warning("test hook: pausing %.1f s at %s", pause_s, where)
            time.sleep(pause_s)  # a worker thread: the event loop keeps running
            return
        log.warning("test hook: SIGKILL at %s", where)
        os.kill(os.getpid(), signal.SIGKILL)

    return hook
