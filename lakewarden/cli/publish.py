"""``lakewarden publish``: the Delta Lake view of a table (``lakewarden.publish``).

    lakewarden publish enable /data/orders   # turn publishing on, publish the current snapshot
    lakewarden publish sync /data/orders     # publish every completed instant not yet published
    lakewarden publish status /data/orders   # the published version and the lag

Each prints the published version and how many versions the Delta log is behind the timeline.
"""

from __future__ import annotations

import click

from lakewarden.api.table import Table
from lakewarden.errors import ConfigurationError
from lakewarden.publish import DeltaPublisher, PublishResult, enable
from lakewarden.settings import Settings


class PublishingOffError(ConfigurationError):
    """``publish sync`` of a table whose publishing is off."""


@click.group()
def command() -> None:
    """Publish a table as a Delta Lake log (_delta_log/) that Delta readers read."""


@command.command("enable")
@click.argument("uri")
def enable_command(uri: str) -> None:
    """Turn publishing on for the table at URI and publish its current snapshot."""
    table = Table.open(uri, settings=Settings())
    _report(enable(table.storage, table.config, table.timeline_log))


@command.command()
@click.argument("uri")
def sync(uri: str) -> None:
    """Publish every completed instant of URI that the Delta log lacks."""
    table = Table.open(uri, settings=Settings())
    if not table.config.publish.delta:
        raise PublishingOffError(
            f"table {table.name!r} at {table.uri} does not publish a Delta log. "
            f"Help: lakewarden publish enable {table.uri}",
            table=table.name,
        )
    _report(DeltaPublisher(table.storage, table.config, table.timeline_log).sync())


@command.command()
@click.argument("uri")
def status(uri: str) -> None:
    """Print the published Delta version of URI and how far it is behind."""
    table = Table.open(uri, settings=Settings())
    s = DeltaPublisher(table.storage, table.config, table.timeline_log).status()
    click.echo(
        f"publishing {'on' if s.enabled else 'off'}; published version {s.published_version} "
        f"(instant {s.published_instant or '-'}); timeline at version {s.target_version}; "
        f"lag {s.lag}"
    )


def _report(result: PublishResult) -> None:
    s = result.status
    wrote = (
        f"wrote versions {result.written[0]}-{result.written[-1]}"
        if result.written
        else ("nothing to write")
    )
    click.echo(
        f"{wrote}; published version {s.published_version} (instant "
        f"{s.published_instant or '-'}), lag {s.lag}, {result.seconds:.3f} s"
    )
