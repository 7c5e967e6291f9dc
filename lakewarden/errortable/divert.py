"""Bad records of a Python write (``Table.write(bad_records="error-table")``) into the error
table, exactly once with the write's instant, with or without Kafka.

A Spark task publishes its bad rows as ``ErrorRecord`` events and the error-sink commits those
of accepted attempts. A Python write is one process holding its one attempt, so it commits its
errors itself through the same idempotent ``commit_errors`` (its exactly-once rule: one error
table instant per source ``<table id>@<instant>``), and a spool makes that survive a crash:

1. before the job commit (``divert``): the bad records, as ``ErrorRow``s with RFC-20's context,
   are written create-if-absent to ``.lakewarden/errors/<instant>.jsonl`` in the main table;
   a failure here abandons the write, so no instant completes without its spool;
2. after ``completed``: ``settle`` commits the spool into the error table, then deletes it;
3. ``settle`` also runs before every such write and from ``lakewarden errors settle``: a
   spool whose instant completed is committed (a crash between ``completed`` and step 2), one
   whose instant was rolled back or aborted is deleted (its records were never written), one
   still pending is left for later.

A spool committed twice (a crash after the error table's ``completed``, before the delete) is
refused by ``commit_errors``'s rule, and then deleted.

A table service (a compaction that diverts the records the table schema cannot hold,
``lakewarden.tableservice.unfit``) runs its plan's instant in several executor attempts, each
of which may divert. Each attempt spools under its own key, ``<instant>.attempt-<n>.jsonl``
(``spool_key(instant, attempt)``), written before the attempt's pre-commit; ``settle``
commits only the spool of the attempt the ``completed`` entry names (``CommitStats.attempt``)
and drops the others (fenced attempts: their output was never committed). So the error table
holds the plan's records exactly once, from the attempt whose output readers see.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from lakewarden.errortable import records as ctx
from lakewarden.errortable.acceptance import SourceKey
from lakewarden.errortable.commit import commit_errors
from lakewarden.errortable.location import chosen_location, error_table_location
from lakewarden.errortable.records import ErrorRow
from lakewarden.errortable.table import (
    SourceErrors,
    SourcesAlreadyCommittedError,
    open_error_table,
)
from lakewarden.handle import TableHandle
from lakewarden.storage import AlreadyExistsError, NotFoundError, Storage
from lakewarden.table.bucket import render_partition_path
from lakewarden.table.instant import Transition
from lakewarden.table.python_rows import python_rows
from lakewarden.table.write_input import BadRecords

SPOOL_DIR: Final = ".lakewarden/errors/"
_SUFFIX: Final = ".jsonl"

log = logging.getLogger(__name__)


@dataclass
class Settled:
    """What one ``settle`` did: instants whose errors it committed, dropped or left."""

    committed: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)


_ATTEMPT: Final = ".attempt-"


def spool_key(instant: str, attempt: int | None = None) -> str:
    """The spool of ``instant``'s bad records; of one executor attempt of a table service."""
    name = instant if attempt is None else f"{instant}{_ATTEMPT}{attempt}"
    return f"{SPOOL_DIR}{name}{_SUFFIX}"


def _parse_spool(key: str) -> tuple[str, int | None]:
    """(instant, executor attempt or None) of a spool key."""
    name = key[len(SPOOL_DIR) : -len(_SUFFIX)]
    instant, found, attempt = name.partition(_ATTEMPT)
    return instant, int(attempt) if found and attempt.isdigit() else None


def error_rows(
    table: TableHandle, instant: str, job_id: str, attempt: str, operation: str, bad: BadRecords
) -> list[ErrorRow]:
    """The ``ErrorRow`` of each bad record, with the context a Spark task gives its own."""
    config = table.config
    schema = json.dumps({f.name: str(f.type) for f in bad.records.schema})
    now = str(_now_ms())
    rows = []
    for index, reason, record in zip(
        bad.indices, bad.reasons, python_rows(bad.records), strict=True
    ):
        key = record.get(config.record_key)
        rows.append(
            ErrorRow(
                uid=str(uuid.uuid4()),
                ts=now,
                schema=schema,
                record=json.dumps(record, default=str, sort_keys=True),
                message=f"Table.write of {config.name}, record {index} of the input: {reason}",
                context={
                    ctx.COMMIT_TIME: instant,
                    ctx.TABLE_NAME: config.name,
                    ctx.TABLE_ID: config.table_id,
                    ctx.TABLE_URI: table.uri,
                    ctx.PARTITION_PATH: _partition_path(config.partition_by, record),
                    ctx.RECORD_KEY: "" if key is None else str(key),
                    ctx.TASK_ATTEMPT: attempt,
                    ctx.JOB_ID: job_id,
                    "operation": operation,
                    "rowIndex": str(index),
                    **chosen_location(table.uri, config, table.settings),
                },
            )
        )
    return rows


def spool(table: TableHandle, instant: str, rows: list[ErrorRow]) -> None:
    """Step 1: the rows, durable before the job commit. A spool already there for this
    instant is kept (a retried call writes the same records).

    Raises: StorageError."""
    spool_rows(table.storage, spool_key(instant), rows)


def spool_rows(storage: Storage, key: str, rows: Sequence[ErrorRow]) -> None:
    """Write ``rows`` at the spool ``key`` (create-if-absent: one already there is kept, the
    same writer's records).

    Raises: StorageError."""
    data = "".join(json.dumps(asdict(row), sort_keys=True) + "\n" for row in rows)
    try:
        storage.write_if_absent(key, data.encode())
    except AlreadyExistsError:
        pass


def settle(table: TableHandle) -> Settled:
    """Steps 2-3 for every spool of ``table``: commit those of completed instants, drop those
    of rolled-back or aborted ones, leave the pending.

    Raises: LockTimeoutError, CommitStateUnknownError, StageFailedError, StorageError (the
    spool stays; the next ``settle`` commits it)."""
    done = Settled()
    spools = [i.key for i in table.storage.list(SPOOL_DIR) if i.key.endswith(_SUFFIX)]
    if not spools:
        return done
    state = table.state()
    for key in spools:
        instant, attempt = _parse_spool(key)
        mine = state.get(instant)
        if mine is None or mine.is_pending:
            done.pending.append(instant)
            continue
        completed_by = mine.commit.attempt if mine.commit is not None else None
        if mine.state is Transition.COMPLETED and (attempt is None or attempt == completed_by):
            _commit(table, instant, key)
            done.committed.append(instant)
        else:  # rolled back, aborted, or a fenced attempt's: its records were never written
            done.dropped.append(instant)
        _delete(table, key)
    return done


def _commit(table: TableHandle, instant: str, key: str) -> None:
    try:
        lines = table.storage.read(key).decode().splitlines()
    except NotFoundError:  # a concurrent settle took it
        return
    rows = tuple(ErrorRow(**_row(json.loads(line))) for line in lines if line)
    location = error_table_location(
        table.uri, table.name, table.settings.error_table, table.config.error_table
    )
    errors = open_error_table(location, coordinator=table.coordinator, settings=table.settings)
    source = SourceErrors(SourceKey(table.table_id, instant), rows)
    try:
        committed = commit_errors(errors, [source])  # None: committed before
    except SourcesAlreadyCommittedError:  # a concurrent settle committed it meanwhile
        committed = None
    log.info(
        "errors of %s@%s: %d records into %s (%s)",
        table.name,
        instant,
        len(rows),
        location.uri,
        committed or "committed before",
    )


def _row(raw: dict[str, Any]) -> dict[str, Any]:
    raw["context"] = {str(k): str(v) for k, v in raw["context"].items()}
    return raw


def _delete(table: TableHandle, key: str) -> None:
    try:
        table.storage.delete(key)
    except NotFoundError:
        pass


def _partition_path(fields: tuple[str, ...] | list[str], record: dict[str, Any]) -> str:
    if not fields:
        return ""
    values = [record.get(f) for f in fields]
    return render_partition_path(list(fields), [None if v is None else str(v) for v in values])


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
