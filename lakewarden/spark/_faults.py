"""Fault injection for tests, switched on per write with ``lakewarden.test.*`` options.

===================================  ============================================================
``fail_first_attempt_of_partition``  ``P``: attempt 0 of Spark partition ``P`` fails *after*
                                     its task commit saved the manifest (the worst moment: all
                                     its files and its manifest exist); later attempts succeed
``exit_first_attempt_of_partition``  ``P``: as ``fail_first_attempt_of_partition``, but the
                                     Python worker of attempt 0 exits (``os._exit``) instead
                                     of raising: a crashed worker, as the OOM killer leaves it
``fail_partition``                   ``P``: every attempt of partition ``P`` fails before writing
``slow_partition``                   ``P:S``: partition ``P`` sleeps ``S`` seconds before writing
``hold_partition``                   ``P:PATH``: partition ``P`` waits until the file ``PATH``
                                     exists before writing (the test creates it when the
                                     partition may go on: a condition, not a guessed duration)
``fail_first_attempt_after_log_append`` ``P``: attempt 0 of partition ``P`` fails right after it
                                     appended a log block (merge-on-read): its block stays in
                                     the log file; later attempts succeed
``fail_after_commit_of_batch``       ``B``: streaming: the commit of micro-batch ``B`` fails right
                                     after its instant completed (as a driver crash before Spark
                                     records the batch in its commit log would)
``hold_after_commit_of_batch``       ``B:PATH``: streaming (``foreachBatch``): after micro-batch
                                     ``B`` committed, wait until ``PATH`` exists (a test kills
                                     the driver there: committed, not yet in Spark's commit log)
===================================  ============================================================

Nothing here runs unless the option is set; production writes never set ``lakewarden.test.*``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

from lakewarden.errors import RetryableError

# How long a held partition waits for its file at most: a test that never releases it fails
# instead of hanging the Spark job.
_HOLD_LIMIT_S = 300.0
# The exit status of a worker ``exit_first_attempt_of_partition`` kills (recognisable in logs).
_EXIT_STATUS = 57


class InjectedFaultError(RetryableError):
    """A failure a test asked for."""


def _int(hooks: Mapping[str, str], name: str) -> int | None:
    value = hooks.get(name)
    return int(value) if value is not None else None


def before_write(hooks: Mapping[str, str], partition: int, attempt: int) -> None:
    """Raises: InjectedFaultError."""
    if not hooks:
        return
    slow = hooks.get("slow_partition")
    if slow is not None:
        target, _, seconds = slow.partition(":")
        if int(target) == partition:
            time.sleep(float(seconds or "1"))
    hold = hooks.get("hold_partition")
    if hold is not None:
        target, _, path = hold.partition(":")
        if int(target) == partition:
            _wait_for_file(Path(path), partition)
    if _int(hooks, "fail_partition") == partition:
        raise InjectedFaultError(f"injected failure of partition {partition}, attempt {attempt}")


def _wait_for_file(path: Path, partition: int) -> None:
    """Raises: InjectedFaultError (the file did not appear within ``_HOLD_LIMIT_S``)."""
    deadline = time.monotonic() + _HOLD_LIMIT_S
    while not path.exists():
        if time.monotonic() >= deadline:
            raise InjectedFaultError(f"partition {partition} was held, never released by {path}")
        time.sleep(0.05)


def after_task_commit(hooks: Mapping[str, str], partition: int, attempt: int) -> None:
    """Raises: InjectedFaultError."""
    if not hooks or attempt != 0:
        return
    if _int(hooks, "fail_first_attempt_of_partition") == partition:
        raise InjectedFaultError(
            f"injected failure of attempt 0 of partition {partition} after its task commit"
        )
    if _int(hooks, "exit_first_attempt_of_partition") == partition:
        os._exit(_EXIT_STATUS)  # no cleanup, no reply to Spark: the worker just dies


def after_log_append(hooks: Mapping[str, str], partition: int, attempt: int) -> None:
    """Raises: InjectedFaultError."""
    if hooks and attempt == 0 and _int(hooks, "fail_first_attempt_after_log_append") == partition:
        raise InjectedFaultError(
            f"injected failure of attempt 0 of partition {partition} after a log append"
        )


def after_batch_commit(hooks: Mapping[str, str], batch_id: int) -> None:
    """Raises: InjectedFaultError."""
    if not hooks:
        return
    if _int(hooks, "fail_after_commit_of_batch") == batch_id:
        raise InjectedFaultError(f"injected failure after the commit of micro-batch {batch_id}")
    hold = hooks.get("hold_after_commit_of_batch")
    if hold is not None:
        target, _, path = hold.partition(":")
        if int(target) == batch_id:
            _wait_for_file(Path(path), -1)
