"""The data source on a real Spark cluster: a standalone master and two workers on loopback
(``_cluster.py``), executors in their own JVMs with their own Python workers, and a driver
submitted with ``spark-submit`` (``_cluster_driver.py``) carrying everything the executors need
in its configuration. One cluster and one driver session for the module: the driver runs every
scenario once, and each test checks one of them, reading the tables back here without Spark.

Speculation is real here, unlike local mode (``test_spark_attempts.py``): the workers are two
hosts (127.0.0.1, 127.0.0.2), so Spark runs a copy of the straggling task on the other one.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _cluster import StandaloneCluster
from _spark_helpers import committed_files, files_on_disk, rows, sorted_rows

import lakewarden
from lakewarden.api.table import Table
from lakewarden.table.instant import Transition

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = str(Path(__file__).resolve().parents[2])
DRIVER = str(Path(__file__).with_name("_cluster_driver.py"))
DRIVER_TIMEOUT_S = 280


@pytest.fixture(scope="module")
def cluster_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Start the cluster, submit the driver, stop the cluster (even when something failed)."""
    work = tmp_path_factory.mktemp("cluster")
    cluster = StandaloneCluster(work)
    try:
        cluster.start()
        done = cluster.submit(DRIVER, [str(work), REPO], sys.executable, REPO, DRIVER_TIMEOUT_S)
    finally:
        cluster.stop()
    (work / "driver.log").write_bytes(done.stderr)
    results = work / "results.json"
    assert results.exists(), f"the driver wrote no results: {done.stderr.decode()[-4000:]}"
    yield json.loads(results.read_text())


def scenario(results: dict[str, Any], name: str) -> dict[str, Any]:
    outcome: dict[str, Any] = results[name]
    assert "error" not in outcome, outcome["error"]
    return outcome


def completed(table: Table) -> list[Any]:
    return [inst for inst in table.timeline() if inst.state is Transition.COMPLETED]


def test_create_on_first_write_then_read_back(cluster_run: dict[str, Any]) -> None:
    outcome = scenario(cluster_run, "create_and_read")
    expected = sorted_rows(rows(range(200)))
    table = Table.open(outcome["uri"])
    assert table.config.record_key == "id"
    assert list(table.config.partition_by) == ["region"]
    assert outcome["read"] == expected  # through spark.read.format("lakewarden") on the cluster
    assert sorted_rows(lakewarden.read(outcome["uri"])) == expected
    assert files_on_disk(Path(outcome["uri"])) == committed_files(table)


def test_upsert_on_the_cluster_merges(cluster_run: dict[str, Any]) -> None:
    outcome = scenario(cluster_run, "upsert")
    expected = sorted_rows(
        pa.concat_tables([rows(range(50)), rows(range(50, 150), ts=2, note="v2")])
    )
    assert outcome["read"] == expected
    assert sorted_rows(lakewarden.read(outcome["uri"])) == expected
    assert len(completed(Table.open(outcome["uri"]))) == 2


def test_streaming_writer_commits_each_micro_batch_once(cluster_run: dict[str, Any]) -> None:
    outcome = scenario(cluster_run, "stream")
    assert outcome["exception"] is None
    assert sorted_rows(lakewarden.read(outcome["uri"])) == sorted_rows(rows(range(60)))
    commits = [inst.commit for inst in completed(Table.open(outcome["uri"])) if inst.commit]
    batches = [c.batch for c in commits if c.batch is not None]
    assert sorted(b.batch_id for b in batches) == [0, 1]
    assert len({b.query_id for b in batches}) == 1


def test_real_speculation_runs_a_second_attempt_and_commits_every_row_once(
    cluster_run: dict[str, Any],
) -> None:
    outcome = scenario(cluster_run, "speculation")
    # Markers are <partition>-<attempt>-<python worker pid>: partition 0 ran twice, in two
    # Python workers (the copy on the other executor), and the other partitions once.
    attempts = [name.split("-") for name in outcome["attempts"]]
    of_0 = {(attempt, pid) for part, attempt, pid in attempts if part == "0"}
    assert {attempt for attempt, _ in of_0} == {"0", "1"}, outcome["attempts"]
    assert len({pid for _, pid in of_0}) == 2
    table = Table.open(outcome["uri"])
    assert [inst.state for inst in table.timeline()] == [Transition.COMPLETED]
    assert sorted_rows(lakewarden.read(outcome["uri"])) == sorted_rows(rows(range(400)))
    # Only the accepted attempt's files are in the table, and nothing else is left behind.
    assert files_on_disk(Path(outcome["uri"])) == committed_files(table)


def test_the_workers_got_no_python_settings_from_the_test_process() -> None:
    """The executors' settings come only from the driver's configuration."""
    from _cluster import worker_env

    env = worker_env()
    assert "PYTHONPATH" not in env and "PYSPARK_PYTHON" not in env
    assert not [k for k in env if k.startswith("LAKEWARDEN_")]
    assert os.path.isdir(os.path.join(env["SPARK_HOME"], "jars"))
