"""``lakewarden compact``: schedule and run compaction of a merge-on-read table.

    lakewarden compact schedule /data/orders                  # prints the plan's instant
    lakewarden compact schedule /data/orders --cancellable    # ingestion takes precedence
    lakewarden compact schedule /data/orders --cancellable --max-age 2h   # cleaner cancels it
    lakewarden compact schedule /data/orders --bad-records error-table    # divert unfit records
    lakewarden compact run /data/orders 20250314092653589     # claim, merge, complete
    lakewarden compact run /data/orders --spark               # every pending plan, on Spark

``run`` is the RFC-79 executor (``Table.run_table_service``): one executor per plan, under a
heartbeat; a run killed mid-way is resumed by running it again (its earlier attempt's files
are rolled back first). ``run`` without an instant runs every pending compaction plan, oldest
first.
"""

from __future__ import annotations

import click

from lakewarden.api.table import Table
from lakewarden.cli._params import cancellation_options, cancellation_policy, instant_param
from lakewarden.cli._service_runner import service_runner, spark_options
from lakewarden.errors import NonRetryableError
from lakewarden.settings import Settings
from lakewarden.table.instant import Action
from lakewarden.tableservice.compaction import COMPACTION_BAD_RECORDS, CompactionBadRecords


class NotMergeOnReadError(NonRetryableError):
    """Compaction was asked of a copy-on-write table."""


def _open(uri: str) -> Table:
    """Raises: NotATableError, NotMergeOnReadError."""
    table = Table.open(uri, settings=Settings())
    if not table.config.merge_on_read:
        raise NotMergeOnReadError(
            f"table {table.name!r} at {uri} is copy-on-write: it has no log files to compact. "
            "Help: compaction applies to tables created with table_type='merge_on_read'.",
            table=table.name,
        )
    return table


@click.group()
def command() -> None:
    """Compaction of merge-on-read tables (RFC-79 table service)."""


@command.command()
@click.argument("uri")
@cancellation_options
@click.option("--partition", "partitions", multiple=True, help="Only these partition paths.")
@click.option("--max-file-groups", type=click.IntRange(min=1), default=None)
@click.option("--min-log-files", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--bad-records",
    type=click.Choice(COMPACTION_BAD_RECORDS),
    default="fail",
    show_default=True,
    help="A merged record the table's schema cannot hold: fail the plan, or set it aside in "
    "the table's error table with the compaction instant (recorded in the plan).",
)
def schedule(
    uri: str,
    cancellable: bool,
    max_age: float | None,
    max_instants: int | None,
    partitions: tuple[str, ...],
    max_file_groups: int | None,
    min_log_files: int,
    bad_records: CompactionBadRecords,
) -> None:
    """Append a compaction plan for the table at URI (prints its instant, or says there is
    nothing to compact)."""
    policy = cancellation_policy(cancellable, max_age, max_instants)
    table = _open(uri)
    instant = table.schedule_compaction(
        partitions=list(partitions) or None,
        max_file_groups=max_file_groups,
        min_log_files=min_log_files,
        cancellable=cancellable,
        cancellation_policy=policy,
        bad_records=bad_records,
    )
    click.echo(str(instant) if instant is not None else "nothing to compact")


@command.command()
@click.argument("uri")
@click.argument("instant", required=False, callback=instant_param)
@spark_options
def run(uri: str, instant: str | None, use_spark: bool, master: str) -> None:
    """Execute the compaction plan INSTANT (default: every pending one) of the table at URI,
    in this process or, with --spark, as Spark jobs (one task per file group)."""
    table = _open(uri)
    if instant is None:
        pending = [
            i.instant for i in table.timeline() if i.action is Action.COMPACTION and i.is_pending
        ]
    else:
        pending = [instant]
    if not pending:
        click.echo("no pending compaction")
        return
    with service_runner(use_spark, master, Settings()) as runner:
        for plan in pending:
            outcome = runner(table, plan)
            failed = outcome.stats.failed_records if outcome.stats is not None else 0
            aside = f" ({failed} record(s) set aside in the error table)" if failed else ""
            click.echo(f"{plan} {outcome.outcome}{aside}")
