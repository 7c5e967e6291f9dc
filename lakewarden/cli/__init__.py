"""The ``lakewarden`` command.

Subcommands plug in without touching this file: every public module of this package
(``lakewarden/cli/<name>.py``, not starting with ``_``) defines ``command``, a
:class:`click.Command` or :class:`click.Group`, which becomes ``lakewarden <name>``
(underscores in the module name become dashes). Modules are imported only when their command
runs (or ``--help`` lists them), so ``lakewarden dev up`` never pays for importing Spark.

Expected failures are handled here, once, for every subcommand: a :class:`LakewardenError`
becomes one line on stderr, ``Error: <message>`` (the message says what to do, "Help: ..."),
and exit status 1, without a traceback; click's usage errors keep exit status 2. Anything
else is a bug and keeps its traceback. A subcommand whose module needs an extra that is not
installed (``lakewarden history`` without ``[kafka]``) is still listed, and running it says
which extra to install.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import click

from lakewarden.cli._logging import configure_logging
from lakewarden.errors import LakewardenError, MissingExtraError


def one_line(err: LakewardenError) -> str:
    """The message of ``err`` on one line (a multi-line message, e.g. with a log tail, is
    joined with spaces)."""
    return " ".join(str(err).split()) or type(err).__name__


class _PackageGroup(click.Group):
    """A group whose subcommands are the public modules of ``lakewarden.cli``, and the one
    place where a ``LakewardenError`` of any subcommand becomes ``Error: ...`` and exit 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LakewardenError as err:
            # ``from None``: the chain is the library's business; the message says what to do.
            raise click.ClickException(one_line(err)) from None

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = {
            info.name.replace("_", "-")
            for info in pkgutil.iter_modules(__path__)
            if not info.name.startswith("_")
        }
        return sorted(names | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        module_name = cmd_name.replace("-", "_")
        if module_name.startswith("_") or module_name not in {
            info.name for info in pkgutil.iter_modules(__path__)
        }:
            return None
        try:
            module = importlib.import_module(f"{__name__}.{module_name}")
        except MissingExtraError as err:
            return _needs_extra(cmd_name, err)
        command = getattr(module, "command", None)
        if not isinstance(command, click.Command):
            raise click.ClickException(
                f"lakewarden.cli.{module_name} defines no `command` (a click.Command)"
            )
        return command


def _needs_extra(name: str, err: MissingExtraError) -> click.Command:
    """A stand-in for a subcommand whose module needs an extra that is not installed: listed
    by ``--help`` with the extra it needs; run (with any arguments, ``--help`` too), it
    fails with ``err`` (one line, exit 1, through ``_PackageGroup.invoke``)."""

    def fail(args: tuple[str, ...]) -> None:
        raise err

    return click.Command(
        name,
        callback=fail,
        params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED)],
        short_help=f"Needs the {err.extra} extra: pip install 'lakewarden[{err.extra}]'",
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )


@click.group(cls=_PackageGroup)
@click.option(
    "--log-level",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="INFO",
    show_default=True,
    help="Threshold of the structured (logfmt) log on stderr.",
)
@click.version_option(package_name="lakewarden")
def cli(log_level: str) -> None:
    """lakewarden: commit coordination for data-lake tables written by Spark."""
    configure_logging(log_level.upper())


def main(argv: list[str] | None = None, **kwargs: Any) -> None:
    """Console-script entry point (``lakewarden = "lakewarden.cli:main"``)."""
    cli.main(args=argv, prog_name="lakewarden", **kwargs)


__all__ = ["cli", "main", "one_line"]
