"""Fault injection for tests, switched on per write with ``lakewarden.test.*`` options.

===================================  ============================================================
``fail_first_attempt_of_partition``  ``P``: attempt 0 of Spark partition ``P`` fails *after*
                                     its task commit saved the manifest (the worst moment: all
                                     its files and its manifest exist); later attempts succeed
``fail_partition``                   ``P``: every attempt of partition ``P`` fails before writing
``slow_partition``                   ``P:S``: partition ``P`` sleeps ``S`` seconds before writing
``fail_after_commit_of_batch``       ``B``: streaming: the commit of micro-batch ``B`` fails right
                                     after its instant completed (as a driver crash before Spark
                                     records the batch in its commit log would)
===================================  ============================================================

Nothing here runs unless the option is set; production writes never set ``lakewarden.test.*``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from lakewarden.errors import RetryableError


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
    if _int(hooks, "fail_partition") == partition:
        raise InjectedFaultError(f"injected failure of partition {partition}, attempt {attempt}")


def after_task_commit(hooks: Mapping[str, str], partition: int, attempt: int) -> None:
    """Raises: InjectedFaultError."""
    if hooks and attempt == 0 and _int(hooks, "fail_first_attempt_of_partition") == partition:
        raise InjectedFaultError(
            f"injected failure of attempt 0 of partition {partition} after its task commit"
        )


def after_batch_commit(hooks: Mapping[str, str], batch_id: int) -> None:
    """Raises: InjectedFaultError."""
    if hooks and _int(hooks, "fail_after_commit_of_batch") == batch_id:
        raise InjectedFaultError(f"injected failure after the commit of micro-batch {batch_id}")
