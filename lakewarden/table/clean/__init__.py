"""Cleaning a table: old file versions by policy, failed writes, job leftovers, orphans.

``Table.clean(policy=None, dry_run=False)`` is the entry point; the service
``services/cleaner`` runs it per table. The clean instant itself (plan, delete, completed,
cancelling expired plans) is ``lakewarden.api.clean``, a layer above: it drives the table
services and publishing, which build on this package. The pieces here:

CleanPolicy, CleaningPolicy       Hudi's three policies and their defaults (``policy``)
plan_retention                    which files of completed writes a policy frees (``retention``)
find_storage_garbage              rolled-back files, finished jobs' leftovers, orphans (``garbage``)
failed_writes, roll_back          rollback of writes whose executor is dead (``rollback``)
InstantCleanedError,              a read of a snapshot a clean deleted files of; a read a clean
read_past_cleans                  overtook (``cleaned``)
"""

# Imported on first use (``lakewarden._lazy``): ``lakewarden.table.config`` imports
# ``policy`` from here, and a Spark task worker must not pay for the cleaner to read a config.

from __future__ import annotations

from typing import TYPE_CHECKING

from lakewarden._lazy import lazy_exports

if TYPE_CHECKING:
    from lakewarden.table.clean.cleaned import (
        InstantCleanedError,
        MissingDataFileError,
        check_not_cleaned,
        read_past_cleans,
    )
    from lakewarden.table.clean.garbage import StorageGarbage, find_storage_garbage
    from lakewarden.table.clean.policy import (
        DEFAULT_ORPHAN_MIN_AGE_S,
        DEFAULT_RETENTION_WINDOW_S,
        CleaningPolicy,
        CleanPolicy,
        InvalidCleanPolicyError,
    )
    from lakewarden.table.clean.retention import RetentionPlan, plan_retention
    from lakewarden.table.clean.rollback import RollbackContext, failed_writes, roll_back

_EXPORTS: dict[str, str] = {
    "InstantCleanedError": "lakewarden.table.clean.cleaned",
    "check_not_cleaned": "lakewarden.table.clean.cleaned",
    "MissingDataFileError": "lakewarden.table.clean.cleaned",
    "read_past_cleans": "lakewarden.table.clean.cleaned",
    "StorageGarbage": "lakewarden.table.clean.garbage",
    "find_storage_garbage": "lakewarden.table.clean.garbage",
    "DEFAULT_ORPHAN_MIN_AGE_S": "lakewarden.table.clean.policy",
    "DEFAULT_RETENTION_WINDOW_S": "lakewarden.table.clean.policy",
    "CleaningPolicy": "lakewarden.table.clean.policy",
    "CleanPolicy": "lakewarden.table.clean.policy",
    "InvalidCleanPolicyError": "lakewarden.table.clean.policy",
    "RetentionPlan": "lakewarden.table.clean.retention",
    "plan_retention": "lakewarden.table.clean.retention",
    "RollbackContext": "lakewarden.table.clean.rollback",
    "failed_writes": "lakewarden.table.clean.rollback",
    "roll_back": "lakewarden.table.clean.rollback",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "DEFAULT_ORPHAN_MIN_AGE_S",
    "DEFAULT_RETENTION_WINDOW_S",
    "CleanPolicy",
    "CleaningPolicy",
    "InstantCleanedError",
    "InvalidCleanPolicyError",
    "MissingDataFileError",
    "RetentionPlan",
    "RollbackContext",
    "StorageGarbage",
    "check_not_cleaned",
    "failed_writes",
    "find_storage_garbage",
    "plan_retention",
    "read_past_cleans",
    "roll_back",
]
