"""``make demo`` runs end to end from nothing and leaves no process behind."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def _lakewarden_processes() -> set[int]:
    """Pids of brokers or SeaweedFS processes whose command line names the demo's temp dir."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read()
        except OSError:
            continue
        if b"lakewarden-demo-" in cmdline:
            found.add(int(entry))
    return found


def test_demo_runs_end_to_end_and_stops_what_it_started() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "lakewarden.demo"],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "COLUMNS": "160"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "demo finished" in result.stdout
    assert "read back 4 rows" in result.stdout
    assert "dead letter (poison)" in result.stdout
    for event in ("LockRequest", "Heartbeat", "TimelineTransition", "ErrorRecord"):
        assert event in result.stdout
    assert _lakewarden_processes() == set()
