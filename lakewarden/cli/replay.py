"""``lakewarden replay``: rebuild a table's timeline from the timeline topic alone and diff
it, entry by entry, against the timeline in storage; re-drive timeline-lock's state module
over the table's recorded lock requests and compare its decisions with the recorded replies.

    lakewarden replay /data/orders                  # exit code 1 on any difference
    lakewarden replay /data/orders --from-beginning # the same, said explicitly
    lakewarden replay /data/orders --since 2025-03-14T09:00

Each difference is one line: ``missing`` (the topic has the entry, storage does not),
``extra`` (storage has it, the topic does not), ``different`` (named fields differ),
``conflicting`` (the topic holds two versions), ``malformed`` (storage's entry does not parse).
With ``--since`` only the entries from the first one read on are compared. The lock
decisions are always re-driven from the oldest request the topic holds (a lock's state is the
fold of all of them); when retention deleted older ones, that is said and nothing is compared.
"""

from __future__ import annotations

import click

from lakewarden.cli._table_events import (
    SINCE_HELP,
    check_since,
    open_table,
    parse_since,
    table_events,
)
from lakewarden.events.topics import LOCK_REPLIES, LOCK_REQUESTS, TIMELINE
from lakewarden.history import (
    RetentionGap,
    TopicReplay,
    Unreadable,
    batch_mode,
    diff_timelines,
    fmt_ms,
    read_storage_entries,
    replay_timeline,
)
from lakewarden.history.lock_replay import LockReplayReport, redrive_locks
from lakewarden.settings import Settings
from lakewarden.table.config import TableConfig


@click.command()
@click.argument("uri")
@click.option("--since", default=None, callback=check_since, help=SINCE_HELP)
@click.option(
    "--from-beginning",
    is_flag=True,
    help="Read every topic from the oldest event it holds (the default; not with --since).",
)
@click.pass_context
def command(ctx: click.Context, uri: str, since: str | None, from_beginning: bool) -> None:
    """Diff the timeline of the table at URI against the one its timeline topic records, and
    its lock decisions against timeline-lock's state module."""
    if from_beginning and since is not None:
        raise click.UsageError("--from-beginning and --since exclude each other")
    settings = Settings()
    storage, config = open_table(uri, settings)
    replay = TopicReplay()
    with batch_mode():  # the events are folded as read; the problems met are returned
        items = replay_timeline(settings, config.table_id, replay, since_ms=parse_since(since))
        topic, summary = replay.entries, replay.summary()
        stored = read_storage_entries(storage)
        if since is not None:  # entries older than the first one read were not asked for
            first = min(topic, default=None)
            stored = {s: e for s, e in stored.items() if first is not None and s >= first}
        # The states are not built: the summary has what is printed (replay.state builds
        # them, with every payload model, if the report's state is read).
        report = diff_timelines(topic, stored, conflicts=replay.conflicts, state=replay.state)
    states = summary.states
    counted = ", ".join(f"{n} {state}" for state, n in sorted(states.items())) or "none"
    click.echo(
        f"table {config.name} ({config.table_id}): {report.topic_entries} entries on "
        f"{TIMELINE.name(settings)}, {report.storage_entries} in storage; "
        f"rebuilt instants: {counted}"
    )
    for rejection in summary.rejected:
        click.echo(f"seq {rejection.seq} rejected by the state machine: {rejection.reason}")
    problems = 0
    for item in items:
        if isinstance(item, Unreadable):
            problems += 1
            click.echo(f"unreadable {item.topic}[{item.partition}]@{item.offset}: {item.reason}")
        elif isinstance(item, RetentionGap):
            problems += 1
            click.echo(
                f"missing: {item.topic}[{item.partition}] offsets below {item.low_offset} were "
                f"deleted (first kept event at {fmt_ms(item.first_kept_ms)})"
            )
    for difference in report.differences:
        click.echo(f"seq {difference.seq} {difference.kind}: {difference.detail}")
    locks = _redrive(settings, config)
    if report.clean and locks.clean and not problems:
        click.echo("no difference")
        return
    click.echo(f"{len(report.differences) + len(locks.differences)} difference(s)")
    ctx.exit(1)


def _redrive(settings: Settings, config: TableConfig) -> LockReplayReport:
    """Re-drive the lock decisions and say how it went.

    Raises: RetryableError, ReadTimeoutError."""
    # From the oldest request kept, whatever --since says: the lock is the fold of them all.
    items = table_events(settings, config, since=None, topics=[LOCK_REQUESTS, LOCK_REPLIES])
    unreadable = [i for i in items if isinstance(i, Unreadable)]
    report = redrive_locks(
        settings, config.table_id, (i for i in items if not isinstance(i, Unreadable))
    )
    if report.skipped is not None:
        click.echo(f"lock decisions not re-driven: {report.skipped}")
        return report
    for item in unreadable:  # the re-drive went on without them, as the service did
        click.echo(f"unreadable {item.topic}[{item.partition}]@{item.offset}: {item.reason}")
    click.echo(
        f"lock decisions: {report.requests} request(s) re-driven through timeline-lock's state "
        f"module against {report.replies} recorded reply(ies): "
        + ("the same" if not report.differences else f"{len(report.differences)} differ")
    )
    for difference in report.differences:
        click.echo(difference.describe())
    return report
