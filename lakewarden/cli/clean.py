"""``lakewarden clean``: clean a table now, or ask the cleaner service to.

    lakewarden clean /data/orders --dry-run                      # what would be deleted, why
    lakewarden clean /data/orders --policy keep-latest-commits=5 # clean with another retention
    lakewarden clean /data/orders --orphans                      # also delete orphan files
    lakewarden clean s3://lake/orders --request                  # the cleaner service does it

Without ``--request`` the clean runs in this process (``Table.clean``), with the coordinator
the settings call for (timeline-lock when Kafka is configured). ``--request`` publishes a
``CleanRequest``: the cleaner service that owns the table cleans it and sweeps it from then on.
"""

from __future__ import annotations

import click

from lakewarden.settings import Settings
from lakewarden.table import CleanPolicy, CleanResult, InvalidCleanPolicyError, Table


def _policy(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        try:
            CleanPolicy.parse(value)
        except InvalidCleanPolicyError as err:
            raise click.BadParameter(str(err)) from None
    return value


@click.command()
@click.argument("table_uri")
@click.option("--dry-run", is_flag=True, help="Change nothing; print what would be deleted.")
@click.option(
    "--policy",
    callback=_policy,
    metavar="POLICY=N",
    help="keep-latest-commits=N, keep-latest-file-versions=N or keep-latest-by-hours=N "
    "(default: the table's, in table.json).",
)
@click.option("--orphans", is_flag=True, help="Also delete orphan files (no instant names them).")
@click.option("--request", is_flag=True, help="Ask the cleaner service instead (needs Kafka).")
@click.option("--verbose", "-v", is_flag=True, help="List every file with its reason.")
def command(
    table_uri: str, dry_run: bool, policy: str | None, orphans: bool, request: bool, verbose: bool
) -> None:
    """Clean TABLE_URI: roll back dead writes, delete old file versions and leftovers."""
    settings = Settings()
    table = Table.open(table_uri, settings=settings)
    if request:
        from lakewarden.clients.clean import request_clean

        request_clean(
            settings,
            table_id=table.table_id,
            table_uri=table.uri,
            policy=policy,
            delete_orphans=orphans,
        )
        click.echo(f"asked the cleaner to clean table {table.name} ({table.table_id})")
        return
    result = table.clean(policy, dry_run=dry_run, delete_orphans=orphans)
    _report(table, result, verbose=verbose or dry_run)


def _report(table: Table, result: CleanResult, *, verbose: bool) -> None:
    would = "would " if result.dry_run else ""
    for instant in result.resumed:
        click.echo(f"finished the interrupted clean {instant}")
    for instant in result.already_done:
        click.echo(f"clean {instant} was completed by another cleaner meanwhile: already done")
    for instant in result.rolled_back:
        click.echo(f"{would}roll back {instant} (its writer is dead)")
    for instant in result.cancelled:
        click.echo(f"{would}cancel plan {instant} (past its cancellation policy, executor dead)")
    size = sum(f.size_bytes for f in result.files if f.upload_id is None)
    uploads = sum(1 for f in result.files if f.upload_id is not None)
    verb = "would delete" if result.dry_run else "deleted"
    click.echo(
        f"table {table.name}: {verb} {len(result.files) - uploads} files ({size} bytes)"
        + (f" and abort {uploads} pending uploads" if uploads else "")
        + f" under {result.policy.describe()}"
        + (f" as clean {result.instant}" if result.instant else "")
    )
    if verbose:
        for file in result.files:
            click.echo(f"  {file.path}: {file.reason}")
    if result.orphans and not any(f in result.files for f in result.orphans):
        click.echo(f"{len(result.orphans)} orphan files (delete them with --orphans):")
        for file in result.orphans:
            click.echo(f"  {file.path}: {file.reason}")
    if result.earliest_retained_instant:
        click.echo(f"time travel works from instant {result.earliest_retained_instant} on")
