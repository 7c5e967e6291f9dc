"""``lakewarden timeline``: check a table's timeline for gaps and repair them.

    lakewarden timeline repair /data/orders               # report gaps; exit 1 if any
    lakewarden timeline repair /data/orders --fill-gaps   # mark each missing entry lost

A gap (an entry missing while a later one exists) stops every read and write of the table
with ``TimelineGapError``. Restore the real entry if you can (a backup, or the timeline topic:
``lakewarden replay``); otherwise ``--fill-gaps`` writes a placeholder at each missing seq,
which readers ignore and report, so the loss is explicit (see ``lakewarden.table.timeline_gaps``).
"""

from __future__ import annotations

import getpass
import socket
import time

import click

from lakewarden.settings import Settings
from lakewarden.storage import open_storage
from lakewarden.table.config import load_config
from lakewarden.table.timeline import Timeline
from lakewarden.table.timeline_gaps import fill_gap, find_gaps


@click.group()
def command() -> None:
    """Check and repair a table's timeline."""


@command.command()
@click.argument("table_uri")
@click.option(
    "--fill-gaps",
    is_flag=True,
    help="Write a 'lost' placeholder at each missing entry (never replaces an entry).",
)
@click.pass_context
def repair(ctx: click.Context, table_uri: str, fill_gaps: bool) -> None:
    """Report the gaps in TABLE_URI's timeline; with --fill-gaps, mark them lost."""
    storage = open_storage(table_uri, Settings())
    config = load_config(storage)
    missing, last = find_gaps(storage)
    if not missing:
        click.echo(f"table {config.name}: {last + 1} entries, no gap")
        return
    click.echo(f"table {config.name}: entries missing below entry {last}: {_ranges(missing)}")
    if not fill_gaps:
        click.echo("run again with --fill-gaps to mark them lost (restore them first if you can)")
        ctx.exit(1)
    note = f"filled by {getpass.getuser()}@{socket.gethostname()} at {time.time():.0f}"
    filled = [seq for seq in missing if fill_gap(storage, seq, note=note)]
    click.echo(f"marked {len(filled)} entries lost: {_ranges(filled)}")
    state = Timeline(storage, table=config.name).load(full_replay=True)
    for rejection in state.rejected:
        if rejection.seq >= min(missing):
            click.echo(f"seq {rejection.seq} ignored: {rejection.reason}")


def _ranges(seqs: list[int]) -> str:
    """``[1, 2, 3, 7]`` as ``1-3, 7``."""
    runs: list[list[int]] = []
    for seq in seqs:
        if runs and seq == runs[-1][1] + 1:
            runs[-1][1] = seq
        else:
            runs.append([seq, seq])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) or "none"
