"""`lakewarden history / explain / replay` against a real broker, timeline-lock and job-committer.

A Spark-like driver commits through the service (completed), a second one loses to a Python
writer at completion (the service rolls it back, naming the conflict), and the Python writer's
own instant completes. Every appender announces its entries on the timeline topic, so
``replay`` finds no difference, until a storage entry is deleted or altered.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from _jc_helpers import Driver, make_table, rows, wait_for
from click.testing import CliRunner, Result
from matplotlib.image import imread

from lakewarden.api.table import Table
from lakewarden.cli import cli
from lakewarden.clients import CommitClient, JobCommitFailedError, KafkaCoordinator
from lakewarden.events.topics import TIMELINE
from lakewarden.history import Recorded, read_table_events
from lakewarden.history.chart import BAR_COLOURS
from lakewarden.settings import Settings
from lakewarden.table.checkpoint import entry_key

pytestmark = [pytest.mark.timeout(240), pytest.mark.usefixtures("committer_service")]


@pytest.fixture
def table(jc_settings: Settings, table_uri: str) -> Iterator[Table]:
    # Table.write commits in this process here (the opt-out), so the story has an instant
    # completed by a writer beside the two the service settled.
    kafka = jc_settings.kafka.model_copy(update={"job_commits": "embedded"})
    coordinator = KafkaCoordinator(jc_settings.model_copy(update={"kafka": kafka}))
    made = make_table(table_uri)
    yield Table.open(table_uri, coordinator=coordinator)
    coordinator.close()
    del made


def run(settings: Settings, *args: str) -> Result:
    env = {
        "LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS": str(settings.kafka.bootstrap_servers),
        "LAKEWARDEN_KAFKA__TOPIC_PREFIX": settings.kafka.topic_prefix,
    }
    return CliRunner().invoke(cli, list(args), env=env)


def timeline_events(settings: Settings, table: Table) -> int:
    events = read_table_events(settings, table.table_id, topics=[TIMELINE])
    return len([e for e in events if isinstance(e, Recorded)])


def test_explain_names_the_true_cause_and_replay_checks_storage_against_the_topic(
    jc_settings: Settings, client: CommitClient, table: Table, tmp_path: Path
) -> None:
    committed = Driver.begin(table)
    client.commit(committed.request([committed.task(0, rows((1, "eu", "a")))]), timeout_s=60)
    loser = Driver.begin(table)
    late = loser.request([loser.task(0, rows((1, "eu", "late")))])
    winner = table.write(rows((1, "eu", "first")), operation="upsert")
    with pytest.raises(JobCommitFailedError):
        client.commit(late, timeout_s=60)
    # 3 instants x (requested, inflight, completed | rolled_back), the last two by the service
    assert wait_for(lambda: timeline_events(jc_settings, table) >= 9, timeout_s=60)

    done = run(jc_settings, "explain", table.uri, committed.instant)
    failed = run(jc_settings, "explain", table.uri, loser.instant)
    written = run(jc_settings, "explain", table.uri, winner.instant)
    history = run(jc_settings, "history", table.uri, "--format", "json")
    clean = run(jc_settings, "replay", table.uri)
    chart = run(jc_settings, "chart", table.uri, "--out", str(tmp_path / "history.png"))

    assert done.exit_code == 0, done.output
    assert f"Instant {committed.instant} (commit) is completed" in done.output
    assert "Completed by job-committer@" in done.output
    assert f"Job {committed.job_id} was committed by job-committer" in done.output
    assert failed.exit_code == 0, failed.output
    assert f"Instant {loser.instant} (commit) is rolled_back" in failed.output
    assert (
        f"Rolled back because the job commit failed: job {loser.job_id} failed at job-commit "
        "stage complete_instant with OverlappingCommitConflict"
    ) in failed.output
    assert winner.instant in failed.output  # the conflict names the instant that won
    assert written.exit_code == 0, written.output
    assert f"Completed by {table.actor} at" in written.output
    assert "holding lock token" in written.output and "granted after" in written.output
    stories = json.loads(history.output)["stories"]
    assert set(stories) == {committed.instant, loser.instant, winner.instant}
    assert stories[winner.instant]["heartbeats"][0]["beats"] >= 1
    assert clean.exit_code == 0, clean.output
    assert "9 entries on" in clean.output and "9 in storage" in clean.output
    # timeline-lock's state module, re-driven over the real requests, took the same decisions
    redriven = re.search(
        r"lock decisions: (\d+) request\(s\) re-driven .* (\d+) recorded", clean.output
    )
    assert redriven is not None, clean.output
    assert int(redriven[1]) >= 6 and int(redriven[2]) >= 6  # 3 acquires and 3 releases at least
    assert ": the same\n" in clean.output
    assert clean.output.rstrip().endswith("no difference")
    assert chart.exit_code == 0, chart.output
    assert "the table lock and 3 instant(s)" in chart.output
    rgb = np.round(imread(str(tmp_path / "history.png"))[..., :3] * 255).astype(int)
    assert rgb.shape == (int(100 * (1.8 + 0.5 * 4)), 1200, 3)  # the lock lane and 3 lanes
    for kind in ("inflight", "lock", "heartbeats"):
        wanted = tuple(int(BAR_COLOURS[kind][i : i + 2], 16) for i in (1, 3, 5))
        assert np.any(np.all(rgb == wanted, axis=-1)), f"no {kind} bar in the chart"

    table.storage.delete(entry_key(7))
    altered = json.loads(table.storage.read(entry_key(4)))
    altered["actor"] = "someone-else"
    table.storage.write(entry_key(4), json.dumps(altered).encode())
    broken = run(jc_settings, "replay", table.uri)

    assert broken.exit_code == 1, broken.output
    assert "seq 4 different: " in broken.output
    assert "actor is 'someone-else' in storage" in broken.output
    assert "seq 7 missing: storage lacks" in broken.output
    assert broken.output.rstrip().endswith("2 difference(s)")
