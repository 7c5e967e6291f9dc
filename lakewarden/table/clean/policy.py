"""Cleaning policies: which old file versions a clean may delete (Hudi's three, its defaults).

- ``keep_latest_commits`` (default, 10): the snapshots as of the newest N completed writes stay
  readable; a file no such snapshot holds is garbage.
- ``keep_latest_file_versions`` (3): every file group keeps its newest N slices.
- ``keep_latest_by_hours`` (24): the snapshots as of every completed write of the last N hours
  stay readable, and the one just before the window (what the table was N hours ago).

A table's policy is part of its ``table.json`` (``TableConfig.clean_policy``); a clean may
override it (``Table.clean(policy=...)``, ``lakewarden clean --policy keep-latest-commits=5``).
Whatever the policy, invariant 6 holds: nothing the latest snapshot, a pending instant or a
pending plan needs is deleted (``lakewarden.table.clean.retention``).

``retention_window_s`` (1 hour, like Delta Lake's ``deletedFileRetentionDuration``) is how long
a superseded file stays after the write that superseded it completed, whatever the policy says:
a reader that planned its files before that write (a Spark job lists its files when it plans,
and its tasks open them for as long as the job runs) is not cut off while it runs. Set it above
the longest read of the table; 0 lets a policy delete a file the moment it is superseded.

``orphan_min_age_s`` (3 days, like Iceberg's remove-orphan-files) is how old a file that no
instant names must be before it counts as an orphan: a younger one may belong to a write whose
``requested`` entry this clean has not read yet. ``temp_min_age_s`` (1 day) is how long a
temporary file a crashed write left (``.lw-tmp-*``) stays untouched before a clean deletes it:
a live write finishes its temporary file in seconds, or minutes for a large data file.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lakewarden.errors import ConfigurationError

DEFAULT_ORPHAN_MIN_AGE_S: Final = 3 * 24 * 3600.0
DEFAULT_RETENTION_WINDOW_S: Final = 3600.0
DEFAULT_TEMP_MIN_AGE_S: Final = 24 * 3600.0


class CleaningPolicy(StrEnum):
    """Hudi's cleaning policies (``hoodie.cleaner.policy``)."""

    KEEP_LATEST_COMMITS = "keep_latest_commits"
    KEEP_LATEST_FILE_VERSIONS = "keep_latest_file_versions"
    KEEP_LATEST_BY_HOURS = "keep_latest_by_hours"


class InvalidCleanPolicyError(ConfigurationError):
    """A policy text or value that is not one of the three policies with a positive count."""


class CleanPolicy(BaseModel):
    """The policy and the retention of each kind (only the chosen one's count is used)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: CleaningPolicy = CleaningPolicy.KEEP_LATEST_COMMITS
    commits_retained: int = Field(default=10, ge=1)
    file_versions_retained: int = Field(default=3, ge=1)
    hours_retained: float = Field(default=24.0, gt=0)
    orphan_min_age_s: float = Field(default=DEFAULT_ORPHAN_MIN_AGE_S, ge=0)
    retention_window_s: float = Field(default=DEFAULT_RETENTION_WINDOW_S, ge=0)
    temp_min_age_s: float = Field(default=DEFAULT_TEMP_MIN_AGE_S, ge=0)

    @property
    def retained(self) -> float:
        """The count of the chosen policy (commits, versions or hours)."""
        if self.policy is CleaningPolicy.KEEP_LATEST_COMMITS:
            return self.commits_retained
        if self.policy is CleaningPolicy.KEEP_LATEST_FILE_VERSIONS:
            return self.file_versions_retained
        return self.hours_retained

    def describe(self) -> str:
        """``keep-latest-commits=10``: the form ``parse`` reads and messages name."""
        return f"{self.policy.value.replace('_', '-')}={self.retained:g}"

    @classmethod
    def parse(cls, text: str, *, base: CleanPolicy | None = None) -> CleanPolicy:
        """``keep-latest-commits=5``, ``keep-latest-file-versions=2``, ``keep-latest-by-hours=6``
        (``_`` or ``-``; the count may be left out for the default), on top of ``base``.

        Raises: InvalidCleanPolicyError naming the accepted forms."""
        name, _, count = text.strip().partition("=")
        try:
            policy = CleaningPolicy(name.strip().lower().replace("-", "_"))
        except ValueError:
            raise InvalidCleanPolicyError(
                f"unknown cleaning policy {text!r}. Help: one of "
                + ", ".join(f"{p.value.replace('_', '-')}=N" for p in CleaningPolicy)
            ) from None
        field = {
            CleaningPolicy.KEEP_LATEST_COMMITS: "commits_retained",
            CleaningPolicy.KEEP_LATEST_FILE_VERSIONS: "file_versions_retained",
            CleaningPolicy.KEEP_LATEST_BY_HOURS: "hours_retained",
        }[policy]
        values = (base or cls()).model_dump()
        values["policy"] = policy
        if count.strip():
            values[field] = count.strip()
        try:
            return cls.model_validate(values)
        except ValidationError as err:
            raise InvalidCleanPolicyError(
                f"invalid cleaning policy {text!r}: {err.errors()[0]['msg']}. Help: the count "
                "is a positive number, e.g. keep-latest-commits=5"
            ) from err


__all__ = [
    "DEFAULT_ORPHAN_MIN_AGE_S",
    "DEFAULT_RETENTION_WINDOW_S",
    "DEFAULT_TEMP_MIN_AGE_S",
    "CleanPolicy",
    "CleaningPolicy",
    "InvalidCleanPolicyError",
]
