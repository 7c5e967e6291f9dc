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


def test_demo_ingests_the_stream_and_stops_what_it_started() -> None:
    before = _demo_processes()  # another demo run on the machine is not ours to judge
    result = subprocess.run(
        [sys.executable, "-m", "lakewarden.demo"],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "COLUMNS": "200"},
    )
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    good = WAVES * EVENTS_PER_WAVE - len(MALFORMED)
    services = [spec.name for spec in SERVICES]  # every registered service runs
    assert f"services: {', '.join(services)}" in out
    batches = [int(b) for b in re.findall(r"^batch (\d+)\s+read", out, re.MULTILINE)]
    assert len(batches) >= 2 and batches == list(range(len(batches))), out
    assert f"{good} rows written, {len(MALFORMED)} bad records" in out
    assert f"Spark reads {good} rows back" in out
    assert f"read back {good} rows" in out
    # the timeline: one completed instant per micro-batch that had rows
    assert len(re.findall(r"│ \d{17} │ commit │ completed │ insert", out)) == len(batches), out
    assert f"{len(MALFORMED)} bad records were left out of the table and written to" in out
    assert "_bad_records" in out
    assert out.count("bad record partition") == len(MALFORMED)
    assert "missing record key 'order_id'" in out
    assert f"stack down stopped: {', '.join([*reversed(services), 'kafka'])}" in out
    assert "demo finished" in out
    assert _demo_processes() - before == set()
