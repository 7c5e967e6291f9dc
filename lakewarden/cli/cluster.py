"""``lakewarden cluster``: schedule and run clustering plans (RFC-79 table services).

    lakewarden cluster schedule /data/orders --cancellable --max-age 2h
    lakewarden cluster run /data/orders 20250314092653589          # in this process
    lakewarden cluster run /data/orders 20250314092653589 --spark  # as a Spark job

The table's coordinator comes from the settings (timeline-lock and heartbeat-monitor when
Kafka is configured, else the in-process one).
"""

from __future__ import annotations

import click

from lakewarden.cli._params import cancellation_options, cancellation_policy, instant_param
from lakewarden.cli._service_runner import service_runner, spark_options
from lakewarden.settings import Settings
from lakewarden.table import Table


@click.group()
def command() -> None:
    """Schedule and run clustering plans."""


@command.command()
@click.argument("table_uri")
@cancellation_options
@click.option("--partition", "partitions", multiple=True, help="Only these partition paths.")
@click.option("--max-file-groups", type=click.IntRange(min=1), help="Cap the plan's input.")
@click.option("--sort-by", multiple=True, help="Sort each rewritten bucket by these columns.")
def schedule(
    table_uri: str,
    cancellable: bool,
    max_age: float | None,
    max_instants: int | None,
    partitions: tuple[str, ...],
    max_file_groups: int | None,
    sort_by: tuple[str, ...],
) -> None:
    """Append a clustering plan to TABLE_URI's timeline and print its instant."""
    policy = cancellation_policy(cancellable, max_age, max_instants)
    table = Table.open(table_uri, settings=Settings())
    instant = table.schedule_clustering(
        partitions=list(partitions) or None,
        max_file_groups=max_file_groups,
        sort_by=list(sort_by) or None,
        cancellable=cancellable,
        cancellation_policy=policy,
    )
    if instant is None:
        click.echo(f"table {table.name}: nothing to cluster")
        return
    plan = table.state().get(str(instant))
    groups = len(plan.plan_file_groups) if plan is not None else 0
    kind = "cancellable " if cancellable else ""
    click.echo(f"scheduled {kind}clustering {instant} of table {table.name} ({groups} file groups)")


@command.command()
@click.argument("table_uri")
@click.argument("instant", callback=instant_param)
@spark_options
def run(table_uri: str, instant: str, use_spark: bool, master: str) -> None:
    """Execute the plan INSTANT of TABLE_URI in this process, or with --spark as a Spark job
    (claim, rewrite, then completed or aborted)."""
    settings = Settings()
    table = Table.open(table_uri, settings=settings)
    with service_runner(use_spark, master, settings) as runner:
        result = runner(table, instant)
    line = f"plan {instant}: {result.outcome}"
    if result.reason:
        line += f" ({result.reason})"
    if result.stats is not None:
        line += f", {len(result.stats.write_stats)} files written"
    click.echo(line)
