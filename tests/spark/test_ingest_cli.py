"""``lakewarden ingest`` end to end, as a user runs it: a real broker, a small topic with a few
malformed records, the command in its own process (its own Spark with the Kafka source jars).
The table must hold exactly the good rows, once each, across a second run that continues
from the checkpoint; with ``--bad-records fail`` nothing is written and the record is named."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from _spark_helpers import make_table

import lakewarden
from lakewarden.demo import create_topic, produce
from lakewarden.spark.ingest import read_bad_records
from lakewarden.table.instant import Transition

pytestmark = [pytest.mark.spark, pytest.mark.slow]

LAKEWARDEN = Path(sys.executable).with_name("lakewarden")
MALFORMED = {7: b"{not json", 31: b'{"region": "eu", "ts": 1}', 64: b'{"id": "seven"}'}


def _events(first: int, count: int) -> list[bytes]:
    events = []
    for i in range(first, first + count):
        row = {"id": i, "region": "eu" if i % 3 else "us", "ts": 1, "amount": i * 1.5, "note": "n"}
        events.append(MALFORMED.get(i, json.dumps(row).encode()))
    return events


def _good_ids(first: int, count: int) -> list[int]:
    return [i for i in range(first, first + count) if i not in MALFORMED]


def _ingest(bootstrap: str, topic: str, table: Path, state: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEWARDEN_KAFKA__")}
    env.update({"LAKEWARDEN_STATE_DIR": str(state), "COLUMNS": "200"})
    result = subprocess.run(
        [str(LAKEWARDEN), "ingest", "--topic", topic, "--table", str(table)]
        + ["--bootstrap", bootstrap, "--trigger", "available-now", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    return f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"


def _ids(table: Path) -> list[int]:
    return sorted(lakewarden.read(str(table)).column("id").to_pylist())


def test_ingest_writes_exactly_the_good_rows_and_continues_from_its_checkpoint(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = f"ingest-{uuid.uuid4().hex[:8]}"
    create_topic(kafka_bootstrap, topic, partitions=2)
    table = make_table(tmp_path / "table")
    root, state = tmp_path / "table", tmp_path / "state"
    produce(kafka_bootstrap, topic, _events(0, 50))
    skip = ("--bad-records", "skip", "--max-records-per-batch", "20")

    first = _ingest(kafka_bootstrap, topic, root, state, *skip)
    assert first.startswith("exit 0"), first
    batches = re.findall(r"^batch (\d+)\s+read (\d+)\s+written (\d+)", first, re.MULTILINE)
    assert len(batches) >= 3, first  # 50 records, at most 20 a batch
    assert sum(int(read) for _, read, _ in batches) == 50
    assert _ids(root) == _good_ids(0, 50)
    assert "50 records read, 48 rows written, 2 bad records" in first
    bad_dir = state / "ingest" / f"orders-{table.table_id}" / topic / "_bad_records"
    assert str(bad_dir) in first.replace("\n", "")
    assert sorted(r["value"] for r in read_bad_records(bad_dir)) == sorted(
        [MALFORMED[7].decode(), MALFORMED[31].decode()]
    )

    produce(kafka_bootstrap, topic, _events(50, 30))  # the second run reads only these
    second = _ingest(kafka_bootstrap, topic, root, state, *skip)
    assert second.startswith("exit 0"), second
    assert "30 records read, 29 rows written, 1 bad records" in second
    assert _ids(root) == _good_ids(0, 80)  # every good row once
    completed = [i for i in table.timeline() if i.state is Transition.COMPLETED]
    assert sum(i.commit.input_records or 0 for i in completed if i.commit) == 77
    reasons = {r["value"]: r["reason"] for r in read_bad_records(bad_dir)}
    assert reasons[MALFORMED[31].decode()] == "missing record key 'id'"
    assert reasons[MALFORMED[64].decode()].startswith("malformed JSON")

    # A fresh checkpoint with --bad-records fail stops at the first bad record of its batch.
    before = {i.instant for i in table.timeline()}
    failed = _ingest(kafka_bootstrap, topic, root, state, "--checkpoint", str(tmp_path / "cp2"))
    assert failed.startswith("exit 1"), failed
    assert re.search(rf"bad record at topic {topic} partition \d offset \d+", failed), failed
    assert _ids(root) == _good_ids(0, 80)  # nothing of the failed batch is visible
    # Whether the failed batch opened an instant at all depends on which of its tasks ran
    # first (the task that meets the bad record fails before opening one); if it did, the
    # instant was rolled back.
    new_instants = [i for i in table.timeline() if i.instant not in before]
    assert all(i.state is Transition.ROLLED_BACK for i in new_instants), new_instants
