"""The error table itself: a lakewarden table of RFC-20 records.

Columns: RFC-20's ``uid`` (the record key), ``ts``, ``schema``, ``record`` (JSON), ``message``
and ``context`` (an Arrow ``map<string, string>``, Spark ``MapType``), then ``source_table``,
``source_table_id``, ``source_instant`` and ``day`` (``yyyy-MM-dd`` of the source instant).
Partitioned by ``source_table`` and ``day``.

``lakewarden.errortable.commit`` commits records into it (through the manifest committer, as
every producer does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import pyarrow as pa

from lakewarden.errors import NonRetryableError
from lakewarden.errortable.acceptance import SourceKey
from lakewarden.errortable.location import ErrorTableLocation
from lakewarden.errortable.records import TABLE_NAME, ErrorRow
from lakewarden.handle import TableHandle
from lakewarden.settings import Settings
from lakewarden.storage import open_storage
from lakewarden.table.config import (
    TableAlreadyExistsError,
    TableConfig,
    load_config,
    save_new_config,
)
from lakewarden.table.coordinator import Coordinator
from lakewarden.table.stats import LEGACY_ERROR_SOURCES_KEY
from lakewarden.table.timeline_state import TimelineState

# Where completed payloads of version 1 kept the sources and the record count (now
# ``CommitStats.error_sources`` and ``input_records``); kept so code that imports them loads.
SOURCES_KEY: Final = LEGACY_ERROR_SOURCES_KEY
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
    coordinator: Coordinator,
    settings: Settings | None = None,
) -> TableHandle:
    """The error table at ``location``, created on first use (a racing creator wins); its
    commits take ``coordinator``'s lock (the error-sink's: timeline-lock). Read it as any
    table (``lakewarden.read(location.uri)``)."""
    storage = open_storage(location.uri, settings)
    config = TableConfig.new(
        name=location.name,
        record_key="uid",
        schema=ERROR_TABLE_SCHEMA,
        partition_by=PARTITION_BY,
    )
    try:
        save_new_config(storage, config)
    except TableAlreadyExistsError:
        config = load_config(storage)
    return TableHandle(storage, config, coordinator=coordinator, settings=settings)


def committed_sources(state: TimelineState) -> set[str]:
    """The source keys (``<table id>@<instant>``) the completed instants hold."""
    found: set[str] = set()
    for inst in state.completed():
        if inst.commit is not None:
            found.update(inst.commit.error_sources)
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
