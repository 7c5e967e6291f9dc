"""``make demo`` runs end to end from nothing and leaves no process behind."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from lakewarden.demo import EVENTS_PER_WAVE, MALFORMED, WAVES
from lakewarden.devstack import SERVICES

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _demo_processes() -> set[int]:
    """Pids of processes whose command line or environment names a demo temp dir: the broker
    (its config path), the services (LAKEWARDEN_STATE_DIR), Spark's JVM (spark.local.dir)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        for name in ("cmdline", "environ"):
            try:
                with open(f"/proc/{entry}/{name}", "rb") as handle:
                    text = handle.read()
            except OSError:
                continue
            if b"lakewarden-demo-" in text:
                found.add(int(entry))
    return found


# The demo is one subprocess with its own budget (below); pytest-timeout must not cut it short
# (that would orphan the stack it started).
@pytest.mark.timeout(660)
def _column_cells(out: str, header: str) -> list[str]:
    """The cells of one column of the first rich table whose header row names ``header``, a
    wrapped cell joined back into one line (its continuation rows have an empty first cell)."""
    lines = iter(out.splitlines())
    for line in lines:
        names = [name.strip() for name in line.split("┃")[1:-1]]
        if header in names:
            break
    else:
        raise AssertionError(f"no table with a column {header!r} in:\n{out}")
    column = names.index(header)
    cells: list[str] = []
    for line in lines:
        if line.startswith("└"):
            break
        row = line.split("│")[1:-1]
        if len(row) != len(names):
            continue  # the rule under the header
        text = row[column].strip()
        if row[0].strip():
            cells.append(text)
        elif cells and text:
            cells[-1] += " " + text
    return cells


def test_demo_ingests_the_stream_shows_the_services_and_stops_what_it_started() -> None:
    before = _demo_processes()  # another demo run on the machine is not ours to judge
    result = subprocess.run(
        [sys.executable, "-m", "lakewarden.demo"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "200"},
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    good = WAVES * EVENTS_PER_WAVE - len(MALFORMED)
    services = [spec.name for spec in SERVICES]  # every registered service runs
    assert f"services: {', '.join(services)}" in out
    # the steps, numbered, in order
    titles = re.findall(r"─ (\d+)\. ([^─]+?) ─", out)
    assert [int(n) for n, _ in titles] == list(range(1, len(titles) + 1)), titles
    batches = [int(b) for b in re.findall(r"^batch (\d+)\s+read", out, re.MULTILINE)]
    assert len(batches) >= 2 and batches == list(range(len(batches))), out
    assert f"{good} rows written, {len(MALFORMED)} bad records -> the error table" in out
    assert f"Spark reads {good} rows back" in out
    assert f"read back {good} rows" in out
    # the timeline: one completed instant per micro-batch that had rows
    assert len(re.findall(r"│ \d{17} │ commit │ completed │ insert", out)) == len(batches), out
    # what the services did, from their events
    assert re.search(r"timeline-lock granted the table lock \d+ times, fencing tokens \d+", out)
    assert re.search(r"heartbeat-monitor received [1-9]\d* heartbeats", out)
    assert re.search(r"job-committer \(.*\) committed [1-9]\d* jobs", out), out
    assert re.search(r"lock token \d+ granted to", out)
    assert re.search(r"job \S+ committed by \S*job-committer", out), out
    # the bad records: committed by error-sink, listed by `lakewarden errors show`
    assert f"error-sink committed {len(MALFORMED)} bad records into the error table" in out
    assert "$ lakewarden errors show" in out and "failed records of" in out
    assert len(re.findall(r"demo\.orders/\d+@\d+", out)) == len(MALFORMED), out
    messages = _column_cells(out, header="reason")
    assert len(messages) == len(MALFORMED), messages
    assert any("missing record key 'order_id'" in message for message in messages), messages
    # a writer killed mid-batch, declared dead by heartbeat-monitor
    assert "killed the writer with SIGKILL" in out
    assert re.search(r"heartbeat-monitor declared instant \d{17} dead", out), out
    assert "heartbeat of demo-writer expired" in out
    # the last step explains the killed writer's instant from the events alone
    assert re.search(r"\$ lakewarden explain \S+ \d{17}", out), out
    assert "writer demo-writer's heartbeat stopped at" in out, out
    # quiet: Spark's and librdkafka's lines went to the log file named at the end
    log = re.search(r"logs: (\S+\.log)", out)
    assert log is not None and os.path.getsize(log.group(1)) > 0, out
    noise = [line for line in (out + result.stderr).splitlines() if re.search(r"\bWARN", line)]
    assert noise == [] and "Deprecat" not in out + result.stderr, noise
    assert result.stderr.strip() == "", result.stderr
    os.remove(log.group(1))
    assert f"stack down stopped: {', '.join([*reversed(services), 'kafka'])}" in out
    assert "demo finished" in out
    assert _demo_processes() - before == set()
