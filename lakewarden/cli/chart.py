"""``lakewarden chart``: the table's history as a picture a person can read.

    lakewarden chart /data/orders --out history.html      # plotly, self-contained, hover text
    lakewarden chart /data/orders --out history.png       # matplotlib
    lakewarden chart /data/orders --out h.html --since 2025-03-14T09:00 --limit 20

A lane per instant (requested -> inflight -> completed / rolled back / aborted), the table
lock's holds with their tokens, heartbeats with their gaps and expiries, cancel requests and
failed job commits. The format follows the file's suffix.
"""

from __future__ import annotations

from pathlib import Path

import click

from lakewarden.cli._table_events import SINCE_HELP, check_since, open_table, table_history
from lakewarden.history.chart import chart_of
from lakewarden.settings import Settings

_FORMATS = (".html", ".png")


def _check_out(ctx: click.Context, param: click.Parameter, value: Path) -> Path:
    """A click callback: the output's suffix picks the format; anything else is a usage
    error before the table is opened.

    Raises: click.BadParameter."""
    if value.suffix.lower() not in _FORMATS:
        raise click.BadParameter(
            f"{value.name!r} ends in neither .html nor .png; the suffix picks the format",
            param_hint="--out",
        )
    return value


@click.command()
@click.argument("uri")
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    callback=_check_out,
    help="The file to write: .html (plotly, self-contained) or .png.",
)
@click.option("--since", default=None, callback=check_since, help=SINCE_HELP)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=60,
    show_default=True,
    help="Draw the newest N instants (a lane each).",
)
def command(uri: str, out: Path, since: str | None, limit: int) -> None:
    """Draw the history of the table at URI into OUT."""
    settings = Settings()
    _, config = open_table(uri, settings)
    history = table_history(settings, config, since=since)
    chart = chart_of(history, limit=limit)
    if out.suffix.lower() == ".png":
        from lakewarden.history.chart_png import render_png  # matplotlib: only when asked

        render_png(chart, out)
    else:
        from lakewarden.history.chart_html import write_html  # plotly: only when asked

        write_html(chart, out)
    shown = len(chart.lanes) - 1
    more = f" ({chart.omitted} older left out; raise --limit)" if chart.omitted else ""
    click.echo(f"wrote {out}: the table lock and {shown} instant(s){more}")
