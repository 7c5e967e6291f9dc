"""``lakewarden errors``: the failed records of a table (RFC-20's error table).

    lakewarden errors show /data/orders [--instant 20240101120000000] [--limit 20]
    lakewarden errors count /data/orders
    lakewarden errors settle /data/orders    # commit what Table.write spooled (bad_records)

The error table is found from the table and the ``error_table`` settings
(``LAKEWARDEN_ERROR_TABLE__*``):
``<root>_errors`` beside it, or the global table, filtered to this table's records.
"""

from __future__ import annotations

from typing import Any

import click
import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

from lakewarden.api.table import Table
from lakewarden.cli._params import instant_param
from lakewarden.errortable import error_table_location
from lakewarden.errortable.records import (
    KAFKA_OFFSET,
    KAFKA_PARTITION,
    KAFKA_TOPIC,
    failure_reason,
)
from lakewarden.settings import Settings
from lakewarden.table.config import NotATableError


def _errors(uri: str, instant: str | None) -> tuple[str, pa.Table | None]:
    settings = Settings()
    source = Table.open(uri, settings=settings)
    location = error_table_location(
        source.uri, source.name, settings.error_table, source.config.error_table
    )
    try:
        errors = Table.open(location.uri, settings=settings)
    except NotATableError:
        return location.uri, None
    where = pc.field("source_table_id") == source.table_id
    if instant is not None:
        where = where & (pc.field("source_instant") == instant)
    return location.uri, errors.read(filter=where)


_INSTANT_OPTION = click.option(
    "--instant",
    default=None,
    callback=instant_param,
    help="Only the records of this instant of the table (17 digits, yyyyMMddHHmmssSSS).",
)


@click.group()
def command() -> None:
    """The failed records of a table (its error table)."""


@command.command()
@click.argument("table_uri")
@_INSTANT_OPTION
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1))
def show(table_uri: str, instant: str | None, limit: int) -> None:
    """Print the failed records of TABLE_URI, newest instant first, one line each."""
    where, rows = _errors(table_uri, instant)
    console = Console()
    if rows is None or rows.num_rows == 0:
        console.print(f"no failed records (error table {where})")
        return
    rows = rows.sort_by([("source_instant", "descending"), ("ts", "ascending")])
    shown = [
        dict(row, context=dict(row["context"] or [])) for row in rows.slice(0, limit).to_pylist()
    ]
    title = f"failed records of {table_uri} ({rows.num_rows}, from {where})"
    console.print(records_table(shown, title=title, width=console.width))
    if rows.num_rows > limit:
        console.print(f"{limit} of {rows.num_rows} shown; --limit {rows.num_rows} shows all")


def records_table(rows: list[dict[str, Any]], *, title: str, width: int) -> RichTable:
    """The error-table ``rows`` (``context`` as a dict) as a table of one line per record
    that fits ``width`` columns (80 and up): where each record came from (its Kafka
    ``topic/partition@offset``, else its partition path), its record key, and why it failed,
    each cut with an ellipsis when too long (the reason takes the width the others leave).
    The instant is a column only when the records span several (else the caption names it),
    the record key only when one has a key (a Kafka record that could not be parsed has
    none); the raw record, the task attempt and the rest stay in the error table."""
    kafka = any(KAFKA_TOPIC in row["context"] for row in rows)
    instants = sorted({row["source_instant"] for row in rows}, reverse=True)
    caption = f"instant {instants[0]}" if len(instants) == 1 else None
    source_width, key_width = max(20, width // 5), max(10, width // 8)
    out = RichTable(title=title, caption=caption)
    if caption is None:
        out.add_column("instant", no_wrap=True, min_width=17)
    out.add_column("source" if kafka else "partition", no_wrap=True, max_width=source_width)
    keys = any(row["context"].get("recordKey") for row in rows)  # none for unparsed records
    if keys:
        out.add_column("record key", no_wrap=True, max_width=key_width)
    # Wrappable for rich's width calculation (so this column is the one narrowed to fit),
    # while each cell is one line cut with an ellipsis.
    out.add_column("reason")
    for row in rows:
        context = row["context"]
        cells = [
            _source(context, source_width),
            *([context.get("recordKey", "")] if keys else []),
            Text(failure_reason(row["message"] or ""), no_wrap=True, overflow="ellipsis"),
        ]
        out.add_row(*([row["source_instant"], *cells] if caption is None else cells))
    return out


def _source(context: dict[str, str], width: int) -> str:
    """Where the record came from in ``width`` characters: ``topic/partition@offset`` with
    the topic cut short first (the offset is what finds the record), else its partition."""
    position = kafka_position(context)
    if not position:
        return context.get("partitionPath", "")
    if len(position) <= width:
        return position
    topic, _, rest = position.rpartition("/")
    room = width - len(rest) - 2  # "…/"
    return f"{topic[:room]}…/{rest}" if room > 0 else position


def kafka_position(context: dict[str, str]) -> str:
    """``topic/partition@offset`` of an ingested record ('' for other records)."""
    if KAFKA_TOPIC not in context:
        return ""
    partition, offset = context.get(KAFKA_PARTITION, "?"), context.get(KAFKA_OFFSET, "?")
    return f"{context[KAFKA_TOPIC]}/{partition}@{offset}"


@command.command()
@click.argument("table_uri")
@_INSTANT_OPTION
def count(table_uri: str, instant: str | None) -> None:
    """Print how many failed records TABLE_URI has."""
    _, rows = _errors(table_uri, instant)
    click.echo(0 if rows is None else rows.num_rows)


@command.command()
@click.argument("table_uri")
def settle(table_uri: str) -> None:
    """Commit into the error table the bad records that Table.write(bad_records="error-table")
    spooled for completed instants of TABLE_URI (a writer that died before committing them),
    and drop those of rolled-back instants."""
    from lakewarden.errortable.divert import settle as settle_spools

    done = settle_spools(Table.open(table_uri, settings=Settings()))
    click.echo(
        f"committed {len(done.committed)}, dropped {len(done.dropped)}, "
        f"pending {len(done.pending)} spooled error batch(es)"
    )
