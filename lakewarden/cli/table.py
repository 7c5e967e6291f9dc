"""``lakewarden table``: create a table, show what it is, print its timeline.

    lakewarden table create /data/orders --record-key id --column id:int64 \\
        --column region:string --column ts:timestamp[us] --partition-by region \\
        --ordering-field ts --buckets 4
    lakewarden table show /data/orders          # config, schema, files, rows, last instants
    lakewarden table timeline /data/orders      # every entry of the log, oldest first

``timeline`` prints each entry as the log holds it (seq, instant, action, transition, actor,
lock token and a summary of the payload), whatever its action or transition: ingestion
commits, table-service plans, cancel requests, aborts, rollbacks, cleans. Entries the state
machine ignored as illegal are marked ``IGNORED`` with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Literal, cast

import click
import pyarrow as pa

from lakewarden.api.table import Table
from lakewarden.settings import Settings
from lakewarden.table.config import FORMAT_VERSION
from lakewarden.table.timeline_state import InstantState, TimelineEntry, TimelineState

_LAST_INSTANTS = 10
_PAYLOAD_WIDTH = 100


def parse_column(ctx: click.Context, param: click.Parameter, values: Sequence[str]) -> pa.Schema:
    """``--column name:type`` values (Arrow type names: int64, string, double,
    timestamp[us], date32, ...) as a schema.

    Raises: click.BadParameter (exit status 2)."""
    fields = []
    for value in values:
        name, sep, type_name = value.partition(":")
        if not sep or not name.strip() or not type_name.strip():
            raise click.BadParameter(f"{value!r} is not NAME:TYPE (e.g. id:int64)")
        try:
            arrow_type = pa.type_for_alias(type_name.strip())
        except ValueError as err:
            raise click.BadParameter(
                f"{type_name!r} is not an Arrow type name (int64, string, double, "
                f"timestamp[us], date32, ...): {err}"
            ) from None
        fields.append(pa.field(name.strip(), arrow_type))
    return pa.schema(fields)


@click.group()
def command() -> None:
    """Create a table, show it, print its timeline."""


@command.command()
@click.argument("uri")
@click.option("--record-key", required=True, help="The record key column.")
@click.option(
    "--column",
    "schema",
    multiple=True,
    required=True,
    callback=parse_column,
    help="A column as NAME:TYPE (repeat, in order).",
)
@click.option("--partition-by", multiple=True, help="A partition column (repeat for several).")
@click.option("--ordering-field", default=None, help="The column whose larger value wins.")
@click.option("--buckets", default=1, show_default=True, type=click.IntRange(min=1))
@click.option("--table-type", type=click.Choice(["cow", "mor"]), default="cow", show_default=True)
@click.option("--name", default=None, help="The table's name (default: the URI's last segment).")
@click.option(
    "--publish-delta",
    is_flag=True,
    default=False,
    help="Publish every commit as a Delta Lake version in _delta_log/.",
)
@click.option(
    "--format-version",
    default=FORMAT_VERSION,
    show_default=True,
    type=click.IntRange(min=1, max=FORMAT_VERSION),
    help="1: base files store every meta column (for lakewarden installs older than 2).",
)
def create(
    uri: str,
    record_key: str,
    schema: pa.Schema,
    partition_by: tuple[str, ...],
    ordering_field: str | None,
    buckets: int,
    table_type: str,
    name: str | None,
    publish_delta: bool,
    format_version: int,
) -> None:
    """Create a table at URI (fails if one exists)."""
    table = Table.create(
        uri,
        name=name or uri.rstrip("/").rsplit("/", 1)[-1] or "table",
        record_key=record_key,
        schema=_key_not_null(schema, record_key),
        partition_by=partition_by,
        ordering_field=ordering_field,
        table_type=cast(Literal["cow", "mor"], table_type),
        buckets=buckets,
        publish_delta=publish_delta,
        format_version=format_version,
        settings=Settings(),
    )
    click.echo(f"created table {table.name} ({table.table_id}) at {table.uri}")


def _key_not_null(schema: pa.Schema, record_key: str) -> pa.Schema:
    # A record key is never null (a missing key column is reported by Table.create).
    if record_key not in schema.names:
        return schema
    index = schema.get_field_index(record_key)
    return schema.set(index, schema.field(index).with_nullable(False))


@command.command()
@click.argument("uri")
@click.option("--last", default=_LAST_INSTANTS, show_default=True, type=click.IntRange(min=1))
def show(uri: str, last: int) -> None:
    """Print the config, schema, file and row counts and the last instants of URI."""
    table = Table.open(uri, settings=Settings())
    click.echo("\n".join(show_lines(table, last)))


def show_lines(table: Table, last: int) -> list[str]:
    """What ``table show`` prints."""
    config = table.config
    state = table.state()
    snapshot = table.snapshot()
    files = sum(len(s.paths) for s in snapshot.slices.values())
    partitions = {g.partition_path for g in snapshot.slices}
    lines = [
        f"table      {config.name}  id {config.table_id}",
        f"uri        {table.uri}",
        f"type       {config.table_type}   format version {config.format_version}",
        f"record key {config.record_key}",
        f"partitions {', '.join(config.partition_by) or '(none)'}",
        f"ordering   {config.ordering_field or '(none)'}",
        f"buckets    {config.buckets}",
        "schema",
        *(f"  {f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in config.pa_schema),
        f"snapshot   as of {snapshot.as_of or '(nothing committed)'}: {files} files in "
        f"{len(snapshot.slices)} file groups, {len(partitions)} partitions, "
        f"{snapshot.num_records} rows"
        + (" (in base files; log files not counted)" if config.table_type == "mor" else ""),
        _publish_line(table, state),
        f"timeline   {state.tail_seq + 1} entries, {len(state.instants)} instants, "
        f"{len(state.pending())} pending, {len(state.rejected)} ignored entries",
        f"last {min(last, len(state.instants))} instants",
    ]
    ordered = sorted(state.instants.values(), key=lambda s: s.requested_seq)
    lines += [f"  {_instant_line(s)}" for s in ordered[-last:]]
    return lines


def _publish_line(table: Table, state: TimelineState) -> str:
    if not table.config.publish.delta:
        return "delta      off (lakewarden publish enable URI turns it on)"
    from lakewarden.publish import DeltaPublisher

    status = DeltaPublisher(table.storage, table.config, table.timeline_log).status(state)
    behind = f"{status.lag} versions behind" if status.lag else "up to date"
    return (
        f"delta      published version {status.published_version} "
        f"(instant {status.published_instant or '-'}), timeline at version "
        f"{status.target_version}: {behind}"
    )


def _instant_line(s: InstantState) -> str:
    parts = [s.instant, str(s.action), str(s.state)]
    if s.operation:
        parts.append(s.operation)
    if s.commit is not None:
        records = sum(w.num_records for w in s.commit.write_stats)
        parts.append(f"{len(s.commit.write_stats)} files, {records} records")
    if s.reason:
        parts.append(f"reason: {s.reason}")
    return "  ".join(parts)


@command.command()
@click.argument("uri")
def timeline(uri: str) -> None:
    """Print every entry of the timeline of URI, oldest first."""
    table = Table.open(uri, settings=Settings())
    ignored = {r.seq: r.reason for r in table.timeline_log.load(full_replay=True).rejected}
    for entry in table.timeline_log.entries():
        click.echo(entry_line(entry, ignored.get(entry.seq)))


def entry_line(entry: TimelineEntry, ignored: str | None = None) -> str:
    """One entry, generically: any action, any transition, any payload."""
    when = datetime.fromtimestamp(entry.wall_time_ms / 1000, UTC).strftime("%H:%M:%S.%f")[:-3]
    token = "-" if entry.lock_token is None else str(entry.lock_token)
    line = (
        f"{entry.seq:>6}  {entry.instant}  {entry.action!s:<11} {entry.transition!s:<16} "
        f"token {token:<4} {when}  {entry.actor}"
    )
    summary = payload_summary(entry.payload)
    if summary:
        line += f"  {summary}"
    if ignored is not None:
        line += f"  IGNORED: {ignored}"
    return line


def payload_summary(payload: dict[str, Any]) -> str:
    """A short text of a payload: scalars as ``key=value``, collections by their size."""
    parts = []
    for key, value in payload.items():
        if isinstance(value, list | tuple):
            parts.append(f"{key}=[{len(value)}]")
        elif isinstance(value, dict):
            inner = value.get("kind") or value.get("type")
            parts.append(f"{key}={{{inner}}}" if inner else f"{key}={{{len(value)}}}")
        elif value is not None and value != "" and value is not False:
            parts.append(f"{key}={value}")
    text = " ".join(parts)
    return text if len(text) <= _PAYLOAD_WIDTH else text[: _PAYLOAD_WIDTH - 3] + "..."


__all__ = ["command", "entry_line", "parse_column", "payload_summary", "show_lines"]
