"""``python -m lakewarden.events``: inspect the event contract and freeze schema history.

    python -m lakewarden.events list     name, version and fingerprint of every current event
    python -m lakewarden.events freeze   copy current schemas missing from schemas/history/

Run ``freeze`` after changing an event schema (and commit the new history file): messages
written with the new schema stay decodable by every later reader.
"""

from __future__ import annotations

import click

from lakewarden.events._schemas import default_schema_dir, freeze, load_schema_set


@click.group()
def main() -> None:
    """The lakewarden event contract (schemas/)."""


@main.command("list")
def list_events() -> None:
    """Print every current event with its version and fingerprint."""
    schema_set = load_schema_set(default_schema_dir())
    for name, schema in sorted(schema_set.current.items()):
        click.echo(f"{name:<20} v{schema.version:<3} {schema.fingerprint.hex()}")
    click.echo(f"{len(schema_set.by_fingerprint)} writer schemas known (current + history)")


@main.command("freeze")
def freeze_history() -> None:
    """Add current schemas missing from schemas/history/."""
    written = freeze(load_schema_set(default_schema_dir()))
    for path in written:
        click.echo(f"froze {path}")
    if not written:
        click.echo("history already holds every current schema")


if __name__ == "__main__":
    main()
