"""Option and argument checks shared by the commands: bad input is a usage error (exit 2),
caught before any table or broker is touched."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

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


_DURATION = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>s|m|h|d)$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

F = TypeVar("F", bound=Callable[..., object])


def duration_param(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """``90s``, ``15m``, ``2h``, ``1d`` in seconds.

    Raises: click.BadParameter (exit status 2)."""
    if value is None:
        return None
    m = _DURATION.match(value.strip())
    if m is None or float(m["n"]) <= 0:
        raise click.BadParameter(f"{value!r} is not a duration like 90s, 15m, 2h or 1d")
    return float(m["n"]) * _SECONDS[m["unit"]]


def cancellation_options(func: F) -> F:
    """RFC-79's plan options, one spelling for every ``schedule`` command: ``--cancellable``,
    and the cancellation policy the cleaner honours (``--max-age``, ``--max-instants``)."""
    func = click.option(
        "--max-instants",
        type=click.IntRange(min=1),
        help="Cancellation policy: the cleaner cancels the plan once this many instants "
        "completed since it was scheduled (needs --cancellable).",
    )(func)
    func = click.option(
        "--max-age",
        callback=duration_param,
        help="Cancellation policy: the cleaner cancels the plan after this long, e.g. 2h "
        "(needs --cancellable).",
    )(func)
    return click.option(
        "--cancellable",
        is_flag=True,
        help="Ingestion takes precedence over the plan, and it may be cancelled (RFC-79).",
    )(func)


def cancellation_policy(
    cancellable: bool, max_age: float | None, max_instants: int | None
) -> dict[str, float] | None:
    """The plan's ``cancellation_policy`` from the options of ``cancellation_options``
    (None: no policy; only ``lakewarden cancel`` or a conflict cancels the plan).

    Raises: click.UsageError (exit status 2) when a policy is given without --cancellable."""
    if max_age is None and max_instants is None:
        return None
    if not cancellable:
        raise click.UsageError("--max-age / --max-instants need --cancellable")
    policy: dict[str, float] = {}
    if max_age is not None:
        policy["max_age_s"] = max_age
    if max_instants is not None:
        policy["max_completed_instants"] = max_instants
    return policy
