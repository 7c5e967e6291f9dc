"""The content of Delta version ``v``: a deterministic function of the table's config, its
timeline and its data files' footers.

The mapping (``TableConfig.publish``): version 0 holds the snapshot as of timeline seq
``since_seq`` (-1: the empty table of a table created with publishing on); version ``k >= 1``
is the ``k``-th instant completed after ``since_seq``, in completion order. Only completed
instants exist for this mapping: a rolled-back, aborted or failed instant never gets a version.

What a Delta reader reads at a version is the *visible base files* of lakewarden's snapshot as
of its instant: every base file of a copy-on-write table, and of a merge-on-read table the base
files alone (the read-optimized view: records still in log files reach Delta readers with the
compaction that folds them into a base file). A version's actions are the difference of two
consecutive such sets: ``add`` for each file that became visible, ``remove`` for each that left
(a copy-on-write upsert or delete, an overwrite, a clustering, a compaction). An instant that
changes no visible file (a clean, a merge-on-read deltacommit) is a version with only
``commitInfo`` and ``txn``, so versions and instants stay one to one.

Times come from the timeline, never the clock: ``modificationTime`` of an ``add`` is the time of
the instant that wrote the file, ``deletionTimestamp`` and ``commitInfo.timestamp`` the time of
the version's instant. Lines are compact JSON with a fixed key order: two publishers of one
version write the same bytes.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from lakewarden.storage import Storage
from lakewarden.table.config import TableConfig
from lakewarden.table.instant import Action, Instant
from lakewarden.table.snapshot import Snapshot, SnapshotBuilder
from lakewarden.table.stats import WriteStat
from lakewarden.table.timeline_state import InstantState, TimelineState

from .schema import protocol_action, schema_string
from .stats import file_stats, partition_values, read_footer

APP_ID = "lakewarden"
# Actions that rewrite records without changing them: Delta's ``dataChange: false``.
_REARRANGING = frozenset({Action.CLUSTERING})


@dataclass(frozen=True, slots=True)
class VisibleFile:
    """A base file a Delta reader reads: its statistic and the instant that wrote it."""

    stat: WriteStat
    written_by: str


@dataclass(frozen=True, slots=True)
class VersionPlan:
    """What Delta version ``version`` says: the instant it publishes (None for version 0),
    the files it adds and removes."""

    version: int
    instant: InstantState | None
    since_seq: int
    adds: tuple[VisibleFile, ...]
    removes: tuple[VisibleFile, ...]


def visible_files(snapshot: Snapshot) -> dict[str, VisibleFile]:
    """The base files of ``snapshot`` by key."""
    return {
        s.base_file.path: VisibleFile(s.base_file, s.base_instant)
        for s in snapshot.slices.values()
        if s.base_file is not None
    }


def published_instants(state: TimelineState, since_seq: int) -> list[InstantState]:
    """The instants of versions 1, 2, ...: those completed after ``since_seq``, in order."""
    return [i for i in state.completed() if (i.completed_seq or 0) > since_seq]


def plan_versions(
    state: TimelineState,
    since_seq: int,
    *,
    start: int = 0,
    builder: SnapshotBuilder | None = None,
) -> Iterator[VersionPlan]:
    """The plans of versions ``start``, ``start + 1``, ... up to the last completed instant.
    A ``builder`` kept between calls spares re-applying the instants it applied before."""
    completed = state.completed()
    # Completion order is seq order: the instants version 0 holds are a prefix.
    base = sum(1 for i in completed if (i.completed_seq or 0) <= since_seq)
    # The index of the snapshot before the first version to yield (-1: the empty table).
    before_index = base + max(start, 1) - 2
    pending_first = start == 0
    if pending_first and before_index < 0:
        yield _first(since_seq, {})
        pending_first = False
    before: dict[str, VisibleFile] = {}
    builder = builder if builder is not None else SnapshotBuilder()
    for index, snapshot in builder.steps(completed, start=max(before_index, 0)):
        files = visible_files(snapshot)
        if index > before_index:
            yield _diff(index - base + 1, completed[index], since_seq, before, files)
        elif pending_first:
            yield _first(since_seq, files)
        before = files


def _first(since_seq: int, files: Mapping[str, VisibleFile]) -> VersionPlan:
    return VersionPlan(0, None, since_seq, tuple(files[k] for k in sorted(files)), ())


def _diff(
    version: int,
    instant: InstantState,
    since_seq: int,
    before: Mapping[str, VisibleFile],
    after: Mapping[str, VisibleFile],
) -> VersionPlan:
    adds = tuple(after[k] for k in sorted(after.keys() - before.keys()))
    removes = tuple(before[k] for k in sorted(before.keys() - after.keys()))
    return VersionPlan(version, instant, since_seq, adds, removes)


def data_path(key: str) -> str:
    """An ``add``/``remove`` path: the key relative to the table root, URL-encoded as the
    protocol asks (``=`` and ``/`` kept)."""
    return urllib.parse.quote(key, safe="/=")


def render_version(plan: VersionPlan, config: TableConfig, storage: Storage) -> bytes:
    """The bytes of ``_delta_log/<version>.json`` for ``plan`` (reads the added files'
    footers for their stats). Raises: UnpublishableSchemaError, StorageError."""
    actions: list[dict[str, Any]] = [{"commitInfo": _commit_info(plan, config)}]
    if plan.version == 0:
        actions.append({"protocol": protocol_action(config.pa_schema)})
        actions.append({"metaData": _metadata(config, _millis(plan, config))})
    txn_version = plan.since_seq if plan.instant is None else plan.instant.completed_seq
    if txn_version is not None and txn_version >= 0:
        when = _millis(plan, config)
        actions.append({"txn": {"appId": APP_ID, "version": txn_version, "lastUpdated": when}})
    data_change = plan.instant is None or plan.instant.action not in _REARRANGING
    for gone in plan.removes:
        actions.append({"remove": _remove(gone, config, plan, data_change)})
    for new in plan.adds:
        actions.append({"add": _add(new, config, storage, data_change)})
    lines = [json.dumps(a, separators=(",", ":"), ensure_ascii=False) for a in actions]
    return ("\n".join(lines) + "\n").encode("utf-8")


def _millis(plan: VersionPlan, config: TableConfig) -> int:
    if plan.instant is not None:
        return Instant(plan.instant.instant).epoch_ms
    if plan.adds:  # version 0 of an enabled table: its newest file's instant
        return max(Instant(f.written_by).epoch_ms for f in plan.adds)
    return 0


def _commit_info(plan: VersionPlan, config: TableConfig) -> dict[str, Any]:
    params: dict[str, str] = {"table": config.name, "tableId": config.table_id}
    if plan.instant is None:
        operation = "CREATE TABLE"
        params["sinceSeq"] = str(plan.since_seq)
    else:
        operation = _operation(plan.instant)
        params["instant"] = plan.instant.instant
        params["action"] = str(plan.instant.action)
        params["seq"] = str(plan.instant.completed_seq)
    return {
        "timestamp": _millis(plan, config),
        "operation": operation,
        "operationParameters": params,
        "engineInfo": APP_ID,
        "isBlindAppend": not plan.removes,
    }


def _operation(instant: InstantState) -> str:
    if instant.action in (Action.COMPACTION, Action.CLUSTERING):
        return "OPTIMIZE"
    if instant.action is Action.CLEAN:
        return "VACUUM END"
    if instant.action is Action.ROLLBACK:
        return "ROLLBACK"
    return "MERGE" if (instant.operation or "") in ("upsert", "delete") else "WRITE"


def _metadata(config: TableConfig, created_ms: int) -> dict[str, Any]:
    return {
        "id": config.table_id,
        "name": config.name,
        "format": {"provider": "parquet", "options": {}},
        "schemaString": schema_string(config.pa_schema),
        "partitionColumns": list(config.partition_by),
        "configuration": {},
        "createdTime": created_ms,
    }


def _add(
    new: VisibleFile, config: TableConfig, storage: Storage, data_change: bool
) -> dict[str, Any]:
    footer = read_footer(storage, new.stat.path)
    return {
        "path": data_path(new.stat.path),
        "partitionValues": partition_values(config, new.stat.file_group.partition_path),
        "size": new.stat.size_bytes,
        "modificationTime": Instant(new.written_by).epoch_ms,
        "dataChange": data_change,
        "stats": file_stats(config, footer),
    }


def _remove(
    gone: VisibleFile, config: TableConfig, plan: VersionPlan, data_change: bool
) -> dict[str, Any]:
    return {
        "path": data_path(gone.stat.path),
        "deletionTimestamp": _millis(plan, config),
        "dataChange": data_change,
        "extendedFileMetadata": True,
        "partitionValues": partition_values(config, gone.stat.file_group.partition_path),
        "size": gone.stat.size_bytes,
    }
