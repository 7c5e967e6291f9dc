"""``lakewarden ingest`` on a table that publishes a Delta log, with the publisher service doing
the publishing (the ingest runs with ``LAKEWARDEN_PUBLISH_ON_COMMIT=false``): every
micro-batch becomes one Delta version, and the service killed with SIGKILL mid-stream and
restarted leaves a log with no gap, no duplicate ``add`` and the bytes a clean
``lakewarden publish sync`` of the same timeline writes into a copy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import deltalake
import pytest
from _spark_helpers import SCHEMA

import lakewarden
from lakewarden.clients import request_clean
from lakewarden.demo import create_topic, produce
from lakewarden.events import ensure_topics
from lakewarden.settings import Settings
from lakewarden.table import Table
from lakewarden.testing import wait_until
from lakewarden_services._common.process import ServiceProcess

pytestmark = [pytest.mark.spark, pytest.mark.slow]

LAKEWARDEN = Path(sys.executable).with_name("lakewarden")
RECORDS = 200
PER_BATCH = 20


def _events(count: int) -> list[bytes]:
    rows = (
        {"id": i, "region": "eu" if i % 3 else "us", "ts": 1, "amount": i * 1.5, "note": "n"}
        for i in range(count)
    )
    return [json.dumps(row).encode() for row in rows]


def _versions(root: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (root / "_delta_log").glob("*.json"))


def _lines(root: Path, version: int) -> list[dict[str, object]]:
    text = (root / "_delta_log" / f"{version:020d}.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _completed(root: Path) -> list[str]:
    return [s.instant for s in Table.open(str(root)).state().completed()]


def test_a_publisher_killed_mid_stream_leaves_the_log_a_clean_sync_writes(
    kafka_settings: Settings, tmp_path: Path
) -> None:
    prefix = f"ip{uuid.uuid4().hex[:8]}."
    settings = kafka_settings.model_copy(
        update={"kafka": kafka_settings.kafka.model_copy(update={"topic_prefix": prefix})}
    )
    ensure_topics(settings)
    bootstrap = settings.kafka.bootstrap_servers or ""
    topic = f"ingest-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=2)
    produce(bootstrap, topic, _events(RECORDS))
    root = tmp_path / "table"
    table = Table.create(
        str(root),
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        ordering_field="ts",
        buckets=2,
        publish_delta=True,
    )
    service = ServiceProcess(
        "lakewarden_services.publisher",
        settings,
        home=tmp_path / "publisher",
        extra_env={"LAKEWARDEN_PUBLISHER_SWEEP_INTERVAL_S": "0.5"},
    )
    service.start()
    try:
        request_clean(settings, table_id=table.table_id, table_uri=str(root))
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEWARDEN_KAFKA__")}
        env.update(
            {
                "LAKEWARDEN_STATE_DIR": str(tmp_path / "state"),
                "LAKEWARDEN_PUBLISH_ON_COMMIT": "false",  # only the service publishes
                "COLUMNS": "200",
            }
        )
        ingest = subprocess.Popen(
            [str(LAKEWARDEN), "ingest", "--topic", topic, "--table", str(root)]
            + ["--bootstrap", bootstrap, "--trigger", "available-now"]
            + ["--max-records-per-batch", str(PER_BATCH), "--bad-records", "fail"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        try:
            # Mid-stream: the service has published some micro-batches, not all.
            wait_until(lambda: len(_versions(root)) >= 3, 240, "two micro-batches published")
            service.kill()
            published = len(_versions(root))
            behind = len(_completed(root))
            # The ingest goes on committing while no publisher runs, and nothing publishes.
            wait_until(
                lambda: len(_completed(root)) > behind or ingest.poll() is not None,
                120,
                "a micro-batch committed while the publisher is down",
            )
            assert len(_versions(root)) == published
            service.start()
            request_clean(settings, table_id=table.table_id, table_uri=str(root))
            output, _ = ingest.communicate(timeout=300)
        finally:
            if ingest.poll() is None:
                ingest.kill()
        assert ingest.returncode == 0, output
        completed = _completed(root)
        assert len(completed) >= RECORDS // PER_BATCH
        wait_until(lambda: len(_versions(root)) == len(completed) + 1, 60, "the log caught up")
    finally:
        service.stop()

    # One version per micro-batch, in order, no gap.
    versions = _versions(root)
    assert versions == list(range(len(completed) + 1))
    named = [
        a["commitInfo"]["operationParameters"]["instant"]  # type: ignore[index]
        for v in versions[1:]
        for a in _lines(root, v)
        if "commitInfo" in a
    ]
    assert named == completed
    # No duplicate add.
    adds = [a["add"]["path"] for v in versions for a in _lines(root, v) if "add" in a]  # type: ignore[index]
    assert len(adds) == len(set(adds))
    # The bytes a clean sync of the same timeline writes into a copy.
    copy = tmp_path / "copy"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("_delta_log"))
    synced = subprocess.run(
        [str(LAKEWARDEN), "publish", "sync", str(copy)], capture_output=True, text=True
    )
    assert synced.returncode == 0, synced.stdout + synced.stderr
    assert _versions(copy) == versions
    for v in versions:
        name = f"{v:020d}.json"
        assert (root / "_delta_log" / name).read_bytes() == (
            copy / "_delta_log" / name
        ).read_bytes(), name
    # And deltalake reads what lakewarden reads.
    delta = deltalake.DeltaTable(str(root))
    expected = sorted(lakewarden.read(str(root)).column("id").to_pylist())
    assert sorted(delta.to_pyarrow_table().column("id").to_pylist()) == expected
    assert expected == list(range(RECORDS))
