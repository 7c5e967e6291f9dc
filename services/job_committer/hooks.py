"""Test hooks of job-committer, from the environment (``HookSettings``; never set in production).

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

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

log = logging.getLogger(__name__)

_PREFIX = "LAKEWARDEN_JOB_COMMITTER_"
CRASH_AT = f"{_PREFIX}CRASH_AT"
CRASH_ONCE = f"{_PREFIX}CRASH_ONCE"
PAUSE_S = f"{_PREFIX}PAUSE_S"


class HookSettings(BaseSettings):
    """The test hooks' environment (``LAKEWARDEN_JOB_COMMITTER_<FIELD>``, see the module doc)."""

    model_config = SettingsConfigDict(env_prefix=_PREFIX, frozen=True, extra="ignore")

    crash_at: str | None = None
    crash_once: Path | None = None
    pause_s: float = Field(default=0.0, ge=0)


def crash_hook_from_env(
    settings: HookSettings | None = None,
) -> Callable[[str, str], None] | None:
    """The hook the environment (or ``settings``) asks for, or None (the normal case)."""
    settings = settings if settings is not None else HookSettings()
    where = settings.crash_at
    if not where:
        return None
    once, pause_s = settings.crash_once, settings.pause_s

    def hook(event: str, stage: str) -> None:
        if f"{event}:{stage}" != where:
            return
        if once is not None:
            if once.exists():
                return
            once.write_text(f"{os.getpid()}\n")
        if pause_s > 0:
            log.warning("test hook: pausing %.1f s at %s", pause_s, where)
            time.sleep(pause_s)  # a worker thread: the event loop keeps running
            return
        log.warning("test hook: SIGKILL at %s", where)
        os.kill(os.getpid(), signal.SIGKILL)

    return hook
