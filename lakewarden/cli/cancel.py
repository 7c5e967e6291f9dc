"""``lakewarden cancel``: RFC-79's request_cancel / execute_cancel of a cancellable plan.

    lakewarden cancel /data/orders 20250314092653589 --reason "reindex"   # request (irrevocable)
    lakewarden cancel /data/orders 20250314092653589 --execute            # delete files, aborted

With Kafka configured (``LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS``) the request goes through the
cancel-manager service (``CancelClient``) and the command prints its ``CancelResult``;
otherwise it runs in this process. A refusal (a completed instant, a live executor, a plan
that is not cancellable) exits 1 with the reason.
"""

from __future__ import annotations

import getpass
import socket

import click

from lakewarden.cli._params import instant_param
from lakewarden.settings import Settings
from lakewarden.table import Table


@click.command()
@click.argument("table_uri")
@click.argument("instant", callback=instant_param)
@click.option(
    "--execute",
    is_flag=True,
    help="execute_cancel: delete the plan's files and append aborted (after a request).",
)
@click.option("--reason", default="cancelled from the command line", show_default=True)
@click.option("--requester", default=None, help="Who asks (default: user@host).")
@click.option("--timeout", "timeout_s", type=float, default=60.0, show_default=True)
def command(
    table_uri: str,
    instant: str,
    execute: bool,
    reason: str,
    requester: str | None,
    timeout_s: float,
) -> None:
    """Request the cancellation of plan INSTANT of TABLE_URI, or with --execute abort it."""
    settings = Settings()
    who = requester or f"{getpass.getuser()}@{socket.gethostname()}"
    table = Table.open(table_uri, settings=settings)
    if settings.kafka.enabled:
        from lakewarden.clients import CancelClient

        with CancelClient(settings) as client:
            call = client.execute_cancel if execute else client.request_cancel
            reply = call(
                table.table_id,
                instant,
                table_uri=table.uri,
                requester=who,
                reason=reason,
                timeout_s=timeout_s,
            )
        if not reply.ok:
            raise click.ClickException(f"{reply.status}: {reply.reason}")
        click.echo(f"plan {instant}: {reply.status} (cancel-manager)")
        return
    if execute:
        outcome = str(table.execute_cancel(instant))
    else:
        outcome = str(table.request_cancel(instant, requested_by=who, reason=reason))
    click.echo(f"plan {instant}: {outcome}")
