"""``lakewarden explain``: why is this instant in this state?

    lakewarden explain /data/orders 20250314092653589

A few sentences from the table's events on Kafka: who completed it with which lock token, or
whose heartbeat stopped and when (broker time), which job-commit stage failed with which error,
who asked to cancel it and why. Missing events (retention, unreadable messages) are named.
"""

from __future__ import annotations

import click

from lakewarden.cli._params import instant_param
from lakewarden.cli._table_events import open_table, table_history
from lakewarden.history import explain
from lakewarden.settings import Settings


@click.command()
@click.argument("uri")
@click.argument("instant", callback=instant_param)
def command(uri: str, instant: str) -> None:
    """Explain the state of INSTANT of the table at URI."""
    settings = Settings()
    _, config = open_table(uri, settings)
    history = table_history(settings, config, since=None)
    for line in explain(history, instant):
        click.echo(line)
