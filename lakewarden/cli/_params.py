"""Option and argument checks shared by the commands: bad input is a usage error (exit 2),
caught before any table or broker is touched."""

from __future__ import annotations

import click

from lakewarden.table.instant import Instant, InvalidInstantError


def instant_param(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A click callback: ``value`` must be an instant time (a typo is not "no records").

    Raises: click.BadParameter (exit status 2)."""
    if value is None:
        return None
    try:
        return str(Instant.parse(value))
    except InvalidInstantError as err:
        raise click.BadParameter(str(err)) from None
