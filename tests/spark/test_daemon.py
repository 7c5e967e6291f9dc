"""``lakewarden.spark.daemon``: the Python workers of a session ``ingest_session`` builds are
forked from lakewarden's daemon, with lakewarden's task code imported before their first task
(so a worker Spark starts after an idle minute imports nothing again) and frozen
(``_worker_heap``: PySpark's collection after each task skips them); a session's own
``spark.python.daemon.module`` wins. Each case is a session in a process of its own
(``_daemon_driver.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DRIVER = Path(__file__).with_name("_daemon_driver.py")


def _workers(tmp_path: Path, *daemon: str) -> list[dict[str, object]]:
    """What each task's worker found, from a session with ``daemon`` (if given) in its conf."""
    done = subprocess.run(
        [sys.executable, str(DRIVER), *daemon],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found: list[dict[str, object]] = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(found) == 2
    return found


def test_an_ingest_session_forks_its_workers_with_lakewarden_imported(tmp_path: Path) -> None:
    for worker in _workers(tmp_path):
        assert "-m lakewarden.spark.daemon" in str(worker["parent"]), worker
        assert worker["task_code_imported"] is True, worker
        assert int(str(worker["frozen"])) > 10_000, worker  # the preloaded modules' objects


def test_a_daemon_given_in_the_session_conf_is_the_one_used(tmp_path: Path) -> None:
    for worker in _workers(tmp_path, "pyspark.daemon"):
        assert "-m pyspark.daemon" in str(worker["parent"]), worker
        assert worker["task_code_imported"] is False, worker
        assert worker["frozen"] == 0, worker
