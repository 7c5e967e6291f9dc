"""The error table itself: a lakewarden table of RFC-20 records, and its idempotent commit.

Columns: RFC-20's ``uid`` (the record key), ``ts``, ``schema``, ``record`` (JSON), ``message``
and ``context`` (an Arrow ``map<string, string>``, Spark ``MapType``), then ``source_table``,
``source_table_id``, ``source_instant`` and ``day`` (``yyyy-MM-dd`` of the source instant).
Partitioned by ``source_table`` and ``day``.

``commit_errors`` appends one instant holding the errors of several main instants:

1. drop the sources already committed (``SOURCES_KEY`` in the commit metadata of completed
   instants of the error table);
2. ``requested`` (under the table lock), then ``inflight`` with the new file groups: append
   groups beside each bucket, as Spark appends, so no commit rewrites another's files;
3. write one Parquet file per file group;
4. ``completed`` with ``SOURCES_KEY`` in the metadata, after re-checking under the lock (and
   after every rebase) that no other instant completed one of these sources meanwhile;
   otherwise roll back, delete the files and raise ``SourcesAlreadyCommittedError``.

A crash before step 4 leaves a pending instant whose files no snapshot names; the records are
read again from Kafka and committed by a later instant.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq

from lakewarden.errors import NonRetryableError
from lakewarden.errortable.acceptance import SourceKey
from lakewarden.errortable.location import ErrorTableLocation
from lakewarden.errortable.records import TABLE_NAME, ErrorRow
from lakewarden.settings import Settings
from lakewarden.table.bucket import append_group, route
from lakewarden.table.config import META_FILE_NAME, TableAlreadyExistsError
from lakewarden.table.coordinator import Coordinator
from lakewarden.table.files import BaseFileName, WriteToken, file_key
from lakewarden.table.stats import CommitStats, FileGroupId, WorkloadProfile, WriteStat
from lakewarden.table.table import Table
from lakewarden.table.timeline_state import TimelineState
from lakewarden.table.transaction import WriteTransaction
from lakewarden.table.writer import stamped

SOURCES_KEY: Final = "lakewarden.errors.sources"
RECORDS_KEY: Final = "lakewarden.errors.records"
OPERATION: Final = "insert"

_STR = pa.string()
ERROR_TABLE_SCHEMA: Final = pa.schema(
    [
        pa.field("uid", _STR, nullable=False),
        pa.field("ts", _STR, nullable=False),
        pa.field("schema", _STR),
        pa.field("record", _STR),
        pa.field("message", _STR),
        pa.field("context", pa.map_(_STR, _STR)),
        pa.field("source_table", _STR, nullable=False),
        pa.field("source_table_id", _STR, nullable=False),
        pa.field("source_instant", _STR, nullable=False),
        pa.field("day", _STR, nullable=False),
    ]
)
PARTITION_BY: Final = ("source_table", "day")


class SourcesAlreadyCommittedError(NonRetryableError):
    """Another instant of the error table completed some of these sources first."""

    def __init__(self, message: str, *, sources: set[str]) -> None:
        super().__init__(message)
        self.sources = sources


@dataclass(frozen=True)
class SourceErrors:
    """The accepted failed records of one main instant."""

    key: SourceKey
    rows: tuple[ErrorRow, ...]


def open_error_table(
    location: ErrorTableLocation,
    *,
    settings: Settings | None = None,
    coordinator: Coordinator | None = None,
) -> Table:
    """The error table at ``location``, created on first use (a racing creator wins)."""
    try:
        return Table.create(
            location.uri,
            name=location.name,
            record_key="uid",
            schema=ERROR_TABLE_SCHEMA,
            partition_by=PARTITION_BY,
            coordinator=coordinator,
            settings=settings,
        )
    except TableAlreadyExistsError:
        return Table.open(location.uri, coordinator=coordinator, settings=settings)


def committed_sources(state: TimelineState) -> set[str]:
    """The source keys (``<table id>@<instant>``) the completed instants hold."""
    found: set[str] = set()
    for inst in state.completed():
        if inst.commit is not None and SOURCES_KEY in inst.commit.extra_metadata:
            found.update(json.loads(inst.commit.extra_metadata[SOURCES_KEY]))
    return found


def rows_table(batches: Sequence[SourceErrors]) -> pa.Table:
    """The error table rows of ``batches``."""
    rows = [r for b in batches for r in b.rows]
    instants = [r.instant for r in rows]
    return pa.table(
        {
            "uid": [r.uid for r in rows],
            "ts": [r.ts for r in rows],
            "schema": [r.schema for r in rows],
            "record": [r.record for r in rows],
            "message": [r.message for r in rows],
            "context": pa.array([list(r.context.items()) for r in rows], pa.map_(_STR, _STR)),
            "source_table": [r.context[TABLE_NAME] for r in rows],
            "source_table_id": [r.table_id for r in rows],
            "source_instant": instants,
            "day": [f"{i[0:4]}-{i[4:6]}-{i[6:8]}" for i in instants],
        },
        schema=ERROR_TABLE_SCHEMA,
    )


def commit_errors(
    table: Table,
    batches: Sequence[SourceErrors],
    *,
    before_complete: Callable[[str], None] | None = None,
) -> str | None:
    """Commit the records of the ``batches`` not committed yet as one instant (steps in the
    module doc); the instant, or None when there was nothing new. ``before_complete(instant)``
    runs after the files are written (tests pause or crash there).

    Raises: SourcesAlreadyCommittedError (nothing committed: reload and retry without them),
    LockTimeoutError, CommitStateUnknownError, storage errors."""
    done = committed_sources(table.state())  # 1.
    batches = [b for b in batches if str(b.key) not in done and b.rows]
    if not batches:
        return None
    sources = sorted(str(b.key) for b in batches)
    data = rows_table(batches)
    txn = WriteTransaction.begin(  # 2.
        table.timeline_log,
        table.coordinator,
        table.table_id,
        operation=OPERATION,
        actor=table.actor,
        plan={"errors": {"sources": sources}},
    )
    written: list[str] = []
    try:
        with txn.heartbeat():
            groups = {
                append_group(canonical, txn.instant, 0): part
                for canonical, part in route(data, table.config).items()
            }
            txn.inflight(WorkloadProfile(operation=OPERATION, file_groups=tuple(groups)))
            stats = [  # 3.
                _write(table, txn.instant, n, group, part, written)
                for n, group in enumerate(groups)
                for part in [groups[group]]
            ]
            commit = CommitStats(
                operation=OPERATION,
                write_stats=tuple(stats),
                extra_metadata={SOURCES_KEY: json.dumps(sources), RECORDS_KEY: str(len(data))},
            )

            def not_committed_yet(state: TimelineState) -> None:
                clash = committed_sources(state) & set(sources)
                if clash:
                    raise SourcesAlreadyCommittedError(
                        f"error table {table.name}: sources {sorted(clash)} were committed by "
                        "another instant meanwhile; nothing of this instant is committed. "
                        "Help: commit again without them.",
                        sources=clash,
                    )

            if before_complete is not None:
                before_complete(txn.instant)
            txn.complete(commit, validate=not_committed_yet)  # 4.
            return txn.instant
    except Exception as err:
        _abandon(table, txn, written, err)
        raise


def _write(
    table: Table, instant: str, n: int, group: FileGroupId, part: pa.Table, written: list[str]
) -> WriteStat:
    config = table.config
    name = BaseFileName(group.file_id, WriteToken(n, 0, 0), instant).render()
    key = file_key(group.partition_path, name)
    rows = stamped(part, instant, config, OPERATION)
    rows = rows.append_column(META_FILE_NAME, pa.repeat(pa.scalar(name), len(rows)))
    rows = rows.select(config.file_schema.names).cast(config.file_schema)
    buffer = io.BytesIO()
    pq.write_table(rows, buffer)
    written.append(key)  # before the write: a failed write may still leave an object
    table.storage.write_if_absent(key, buffer.getvalue())
    return WriteStat(
        file_group=group,
        path=key,
        base_instant=instant,
        num_records=len(rows),
        num_inserts=len(rows),
        size_bytes=buffer.tell(),
    )


def _abandon(table: Table, txn: WriteTransaction, written: list[str], err: Exception) -> None:
    """``rolled_back`` first (refused if our completion landed: then the files stay), then
    delete the files; failures are notes on ``err``."""
    try:
        txn.rollback(f"{type(err).__name__}: {err}")
    except Exception as rollback_err:
        err.add_note(f"rolling back error-table instant {txn.instant} failed: {rollback_err!r}")
        return
    for key in written:
        try:
            table.storage.delete(key)
        except Exception as delete_err:
            err.add_note(f"deleting {key} failed: {delete_err!r}")
