"""The named errors of table services (RFC-79), each saying what was found and what to do.

The cancel-request errors are defined beside the timeline (``lakewarden.table.cancel``, since
ingestion requests cancellations too) and re-exported here.
"""

from __future__ import annotations

from lakewarden.errors import NonRetryableError, RetryableError
from lakewarden.table.cancel import (
    InstantAlreadyCompletedError,
    PlanNotCancellableError,
    UnknownPlanError,
)

__all__ = [
    "AttemptFencedError",
    "CancelNotRequestedError",
    "ExecutorOutputLostError",
    "InstantAlreadyCompletedError",
    "InvalidPlanOptionsError",
    "NotATableServicePlanError",
    "PlanAlreadyExecutingError",
    "PlanNotCancellableError",
    "PlanStillExecutingError",
    "RollbackNotFencedError",
    "UnknownPlanError",
    "UndivertibleRecordsError",
    "UnknownStrategyError",
    "UnwritableRecordsError",
]


class PlanAlreadyExecutingError(RetryableError):
    """Another executor's heartbeat for the plan is alive: at most one executor per plan
    (invariant 4). ``owner`` names it (None when the coordinator does not know who)."""

    def __init__(self, message: str, *, table: str, instant: str, owner: str | None) -> None:
        super().__init__(message, table=table, instant=instant)
        self.owner = owner


class PlanStillExecutingError(RetryableError):
    """``execute_cancel`` found a live heartbeat for the plan: its files cannot be deleted
    while an executor works on them (the cancel request stands; retry after it stops)."""

    def __init__(self, message: str, *, table: str, instant: str, owner: str | None) -> None:
        super().__init__(message, table=table, instant=instant)
        self.owner = owner


class CancelNotRequestedError(NonRetryableError):
    """``execute_cancel`` of a plan whose cancellation was never requested."""


class NotATableServicePlanError(NonRetryableError):
    """The instant is not a compaction or clustering plan (an ingestion, clean, rollback)."""


class UnknownStrategyError(NonRetryableError):
    """The plan names a strategy no executor in this process knows."""


class InvalidPlanOptionsError(NonRetryableError):
    """Scheduling options that cannot make a plan (an unknown sort column, a policy on a
    non-cancellable plan, a non-positive limit)."""


class ExecutorOutputLostError(NonRetryableError):
    """At pre-commit a file this executor wrote is gone: another executor, believing this
    one dead, rolled the attempt back. Nothing was completed; the plan stays pending."""


class AttemptFencedError(NonRetryableError):
    """At pre-commit the plan's latest ``inflight`` names another executor attempt: a retry
    fenced this one (and may delete its files). Nothing was completed; ``attempt`` is this
    one, ``fenced_by`` the attempt that alone may complete the plan now."""

    def __init__(
        self, message: str, *, table: str, instant: str, attempt: int, fenced_by: int
    ) -> None:
        super().__init__(message, table=table, instant=instant, attempt=str(attempt))
        self.fenced_by = fenced_by


class RollbackNotFencedError(NonRetryableError):
    """A plan's attempts' files were to be deleted while no timeline entry made those attempts
    uncommittable (no cancel request, no ``inflight`` of the attempt that keeps its files):
    refused, nothing deleted (invariant 10)."""


class UnwritableRecordsError(NonRetryableError):
    """A compaction's merged records include ``count`` the table's schema cannot hold, and
    the plan fails on them (``bad_records="fail"``). Nothing was completed; the plan stays
    pending. ``file_group`` names the first file group where they were found."""

    def __init__(
        self, message: str, *, table: str, instant: str, file_group: str, count: int
    ) -> None:
        super().__init__(message, table=table, instant=instant)
        self.file_group = file_group
        self.count = count


class UndivertibleRecordsError(NonRetryableError):
    """A compaction input that cannot be read as records (a committed log block whose
    content does not decode, a delete block whose keys do not parse, a column whose types
    cannot be merged): no record can be set aside for the error table, and skipping it would
    change what the file group holds without a trace. The plan fails whatever its
    ``bad_records``; nothing was completed."""

    def __init__(self, message: str, *, table: str, instant: str, file_group: str) -> None:
        super().__init__(message, table=table, instant=instant)
        self.file_group = file_group
