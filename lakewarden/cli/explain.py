"""``lakewarden explain``: why is this instant in this state?

    lakewarden explain /data/orders 20250314092653589
    lakewarden explain /data/orders 20250314092653589 --from-beginning

The topics are read from 15 minutes before the instant's time (Kafka finds the offsets by
timestamp), since nothing of an instant's story happens earlier than its lock request, to 5
minutes after its terminal entry (completed, aborted, rolled_back: the storage timeline says
when it was appended); a pending instant is read to the end of the topics. So explaining an
instant reads what happened while it lived, not the table's whole past or future
(``lakewarden.history.window``). ``--from-beginning`` reads every topic from its oldest
event to its end instead.

A few sentences from the table's events on Kafka: who completed it with which lock token, or
whose heartbeat stopped and when (broker time), which job-commit stage failed with which error,
who asked to cancel it and why. Missing events (retention, unreadable messages) are named.
"""

from __future__ import annotations

import click

from lakewarden.cli._params import instant_param
from lakewarden.cli._table_events import open_table, table_history
from lakewarden.history import ReadWindow, explain, explain_window, terminal_time_ms
from lakewarden.settings import Settings


@click.command()
@click.argument("uri")
@click.argument("instant", callback=instant_param)
@click.option(
    "--from-beginning",
    is_flag=True,
    help=(
        "Read every topic from its oldest event to its end (default: from 15 min before the "
        "instant to 5 min after its terminal entry)."
    ),
)
def command(uri: str, instant: str, from_beginning: bool) -> None:
    """Explain the state of INSTANT of the table at URI."""
    settings = Settings()
    storage, config = open_table(uri, settings)
    window = (
        ReadWindow()
        if from_beginning
        else explain_window(instant, terminal_time_ms(storage, instant))
    )
    history = table_history(
        settings, config, since=None, since_ms=window.since_ms, until_ms=window.until_ms
    )
    for line in explain(history, instant):
        click.echo(line)
