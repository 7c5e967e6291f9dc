"""``lakewarden history``: the stories of a table's instants, told by its events on Kafka.

    lakewarden history /data/orders
    lakewarden history /data/orders --instant 20250314092653589 --format json
    lakewarden history /data/orders --since 2025-03-14T09:00

A line per event that matters (lock grants, heartbeats, task manifests, job commits,
transitions, cancels), oldest first; then what could not be read and what retention deleted.
"""

from __future__ import annotations

import json

import click

from lakewarden.cli._params import instant_param
from lakewarden.cli._table_events import SINCE_HELP, check_since, open_table, table_history
from lakewarden.history import history_json, story_lines, table_lines
from lakewarden.settings import Settings


@click.command()
@click.argument("uri")
@click.option("--since", default=None, callback=check_since, help=SINCE_HELP)
@click.option(
    "--instant", default=None, callback=instant_param, help="Only the story of this instant."
)
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def command(uri: str, since: str | None, instant: str | None, fmt: str) -> None:
    """Print the history of the table at URI from its events."""
    settings = Settings()
    _, config = open_table(uri, settings)
    history = table_history(settings, config, since=since)
    if fmt == "json":
        click.echo(json.dumps(history_json(history, instant), indent=2, sort_keys=True))
        return
    stories = history.ordered()
    if instant is not None:
        stories = [s for s in stories if s.instant == instant]
        if not stories:
            click.echo(f"no event names instant {instant}")
    for story in stories:
        click.echo("\n".join(story_lines(history, story)))
    click.echo("\n".join(table_lines(history)))
