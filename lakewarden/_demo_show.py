"""What ``make demo`` shows of the services (``lakewarden.demo``'s steps 3-5).

Everything here is read the way a user would read it: the services' events on Kafka through
``lakewarden.history`` (what ``lakewarden history`` prints), the error table through
``lakewarden errors show``, and a real writer process killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from rich.console import Console

from lakewarden.api.table import Table
from lakewarden.history import build_history, read_table_events, story_lines
from lakewarden.history.model import InstantStory, TableHistory
from lakewarden.settings import Settings
from lakewarden.table.config import NotATableError

# The killed writer beats every second and may miss 3: declared dead ~3 s after its last beat.
WRITER_INTERVAL_S = 1
WRITER_MISSES = 3
_WAIT_S = 90.0


def table_history(settings: Settings, table: Table) -> TableHistory:
    """The table's history from its events on every topic, read now.

    Raises: ConfigurationError, RetryableError, ReadTimeoutError."""
    return build_history(table.table_id, read_table_events(settings, table.table_id))


def show_services(console: Console, settings: Settings, table: Table) -> None:
    """Counts of what each service did, then one micro-batch's story, event by event."""
    history = table_history(settings, table)
    stories = [s for s in history.ordered() if s.job_results]
    grants = [g for g in history.locks if g.token is not None]
    beats = sum(t.beats for s in history.ordered() for t in s.heartbeats)
    committed = sum(1 for s in stories for r in s.job_results if r.status == "committed")
    committers = sorted({r.committer.split("@")[0] for s in stories for r in s.job_results})
    tokens = sorted(g.token for g in grants if g.token is not None)
    console.print(
        f"timeline-lock granted the table lock {len(grants)} times, fencing tokens "
        f"{tokens[0] if tokens else '-'}..{tokens[-1] if tokens else '-'} (each written into "
        "the timeline entries of its holder)"
    )
    console.print(
        f"heartbeat-monitor received {beats} heartbeats for {len(history.stories)} instants"
    )
    console.print(
        f"job-committer ({', '.join(committers) or '-'}) committed {committed} jobs: it "
        "renamed the accepted task attempts' files and appended `completed`"
    )
    if stories:
        story = _richest(stories)
        console.print(
            f"the story of one micro-batch (lakewarden history --instant {story.instant}):"
        )
        for line in story_lines(history, story):
            console.print(f"  {line}", highlight=False)


def _richest(stories: list[InstantStory]) -> InstantStory:
    # The micro-batch with bad records shows every service at work, error-sink included.
    with_errors = [s for s in stories if s.error_records]
    return (with_errors or stories)[0]


def show_errors(console: Console, settings: Settings, table: Table, expected: int) -> int:
    """Wait until error-sink committed ``expected`` failed records, then ``lakewarden errors
    show``; returns how many the error table holds for the table."""
    from lakewarden.cli import main
    from lakewarden.errortable import error_table_location

    location = error_table_location(
        table.uri, table.name, settings.error_table, table.config.error_table
    )

    def count() -> int:
        try:
            rows: int = Table.open(location.uri, settings=settings).read().num_rows
            return rows
        except NotATableError:
            return 0

    deadline = time.monotonic() + _WAIT_S
    with console.status("waiting for error-sink to commit the bad records ..."):
        while count() < expected and time.monotonic() < deadline:
            time.sleep(0.5)
    found = count()
    console.print(
        f"error-sink committed {found} bad records into the error table {location.uri}, each "
        "with its Kafka topic, partition and offset, under the micro-batch's instant:"
    )
    console.print(f"$ lakewarden errors show {table.uri}", highlight=False)
    sys.stdout.flush()
    main(["errors", "show", table.uri], standalone_mode=False)
    return found


def kill_a_writer(console: Console, settings: Settings, table: Table, log_file: Path) -> None:
    """Start a writer process, kill it mid-batch, and show heartbeat-monitor declaring its
    instant dead (the instant's story from the events)."""
    env = {
        **os.environ,
        "LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS": settings.kafka.bootstrap_servers or "",
        "LAKEWARDEN_KAFKA__TOPIC_PREFIX": settings.kafka.topic_prefix,
        "LAKEWARDEN_HEARTBEAT__INTERVAL_S": str(WRITER_INTERVAL_S),
        "LAKEWARDEN_HEARTBEAT__TOLERABLE_MISSES": str(WRITER_MISSES),
    }
    with log_file.open("a") as log:
        writer = subprocess.Popen(
            [sys.executable, "-m", "lakewarden._demo_writer", table.uri],
            env=env,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
        )
    try:
        instant = _ready_instant(writer)
        console.print(
            f"a writer (pid {writer.pid}) opened instant {instant} under timeline-lock's lease "
            f"and beats every {WRITER_INTERVAL_S} s ..."
        )
        time.sleep(2 * WRITER_INTERVAL_S)  # a few beats, so there is a trail to show
        os.killpg(writer.pid, signal.SIGKILL)
        writer.wait(10)
        console.print("[red]killed[/] the writer with SIGKILL in the middle of its batch")
        story = _wait_for_expiry(console, settings, table, instant)
    finally:
        if writer.poll() is None:
            os.killpg(writer.pid, signal.SIGKILL)
            writer.wait(10)
        if writer.stdout is not None:
            writer.stdout.close()
    if story is None or not story.expiries:
        console.print(
            f"[red]heartbeat-monitor did not declare {instant} dead within {_WAIT_S:.0f} s"
        )
        return
    expiry = story.expiries[0]
    state = table.state().get(instant)
    console.print(
        f"heartbeat-monitor declared instant {instant} dead: no beat from {expiry.owner} for "
        f"{expiry.tolerance_ms} ms (its {WRITER_MISSES} tolerable misses). The instant is "
        f"{state.state if state is not None else '?'} on the timeline (the cleaner rolls a dead "
        "write back); nothing of it is ever visible to readers."
    )
    history = table_history(settings, table)
    for line in story_lines(history, story):
        console.print(f"  {line}", highlight=False)


def _ready_instant(writer: subprocess.Popen[str]) -> str:
    """The instant the writer prints once it beats. Raises: RuntimeError."""
    line: list[str] = []
    reader = threading.Thread(
        target=lambda: line.append(writer.stdout.readline() if writer.stdout else "")
    )
    reader.start()
    reader.join(_WAIT_S)
    if not line or not line[0].startswith("ready "):
        raise RuntimeError(f"the demo writer did not start: {line[0] if line else 'no output'}")
    return line[0].split()[1]


def _wait_for_expiry(
    console: Console, settings: Settings, table: Table, instant: str
) -> InstantStory | None:
    deadline = time.monotonic() + _WAIT_S
    with console.status("waiting for heartbeat-monitor ..."):
        while time.monotonic() < deadline:
            story = table_history(settings, table).story(instant)
            if story is not None and story.expiries:
                return story
            time.sleep(1.0)
    return None
