"""``lakewarden errors``: the failed records of a table (RFC-20's error table).

    lakewarden errors show /data/orders [--instant 20240101120000000] [--limit 20]
    lakewarden errors count /data/orders
    lakewarden errors settle /data/orders    # commit what Table.write spooled (bad_records)

The error table is found from the table and the ``error_table`` settings
(``LAKEWARDEN_ERROR_TABLE__*``):
``<root>_errors`` beside it, or the global table, filtered to this table's records.
"""

from __future__ import annotations

import click
import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.table import Table as RichTable

from lakewarden.cli._params import instant_param
from lakewarden.errortable import error_table_location
from lakewarden.errortable.records import KAFKA_OFFSET, KAFKA_PARTITION, KAFKA_TOPIC
from lakewarden.settings import Settings
from lakewarden.table.config import NotATableError
from lakewarden.table.table import Table


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
    """Print the failed records of TABLE_URI, newest instant first."""
    where, rows = _errors(table_uri, instant)
    console = Console()
    if rows is None or rows.num_rows == 0:
        console.print(f"no failed records (error table {where})")
        return
    rows = rows.sort_by([("source_instant", "descending"), ("ts", "ascending")])
    out = RichTable(title=f"failed records of {table_uri} ({rows.num_rows}, from {where})")
    shown = [
        dict(row, context=dict(row["context"] or [])) for row in rows.slice(0, limit).to_pylist()
    ]
    # Records of an ingestion (``lakewarden ingest --bad-records error-table``) name their
    # Kafka topic, partition and offset; a bad row of a Spark write its key and partition.
    kafka = any(KAFKA_TOPIC in row["context"] for row in shown)
    columns = ["instant", "kafka", "record key", "partition", "attempt", "message", "record"]
    for column in columns if kafka else [c for c in columns if c != "kafka"]:
        out.add_column(column, overflow="fold")
    for row in shown:
        context = row["context"]
        cells = [
            row["source_instant"],
            kafka_position(context),
            context.get("recordKey", ""),
            context.get("partitionPath", ""),
            context.get("taskAttempt", ""),
            row["message"] or "",
            row["record"] or "",
        ]
        out.add_row(*(cells if kafka else cells[:1] + cells[2:]))
    console.print(out)


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
