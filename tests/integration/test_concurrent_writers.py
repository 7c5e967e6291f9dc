"""Two processes upsert overlapping keys into one local table at the same time.

Each process runs this file as a script (``worker``): it opens the table, waits for a start
signal, then writes many rounds of upserts through ``Table.write`` as fast as it can and
records every outcome. Processes share nothing but the table directory: no lock is common to
them (the embedded coordinator is per process), so only the timeline's put-if-absent appends
and the conflict rules keep them apart.

At the end:
- every failure is the named ``OverlappingCommitConflict``, and its instant is rolled back;
- the completed instants are exactly the writes that reported success;
- the table equals the successful writes applied in completion order with the upsert rule;
- nothing a loser wrote is visible, and its files are gone.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakewarden.api.table import Table
from lakewarden.table.instant import Transition
from lakewarden.testing import wait_until

SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("v", pa.string())])
KEYS = 24
ROUNDS = 20


def worker(uri: str, me: str, go: Path, out: Path, seed: int) -> None:
    """One writer process: ROUNDS upserts of random overlapping keys, outcomes to ``out``."""
    from lakewarden.table.conflicts import WriteConflictError

    table = Table.open(uri)
    rng = random.Random(seed)
    _ready(out).touch()  # imported and opened: the test may give the start signal
    while not go.exists():
        time.sleep(0.005)
    outcomes: list[dict[str, Any]] = []
    for round_no in range(ROUNDS):
        keys = sorted(rng.sample(range(KEYS), rng.randint(3, KEYS // 2)))
        records = [{"id": k, "ts": rng.randint(0, 4), "v": f"{me}-{round_no}-{k}"} for k in keys]
        outcome: dict[str, Any] = {"records": records}
        try:
            outcome["instant"] = table.write(pa.Table.from_pylist(records, schema=SCHEMA)).instant
            outcome["ok"] = True
        except WriteConflictError as err:
            outcome.update(ok=False, error=type(err).__name__, instant=err.instant, msg=str(err))
        except Exception as err:  # reported, and failed on, by the test
            outcome.update(ok=False, error=type(err).__name__, instant=None, msg=repr(err))
        outcomes.append(outcome)
    out.write_text(json.dumps(outcomes))


def _ready(out: Path) -> Path:
    return out.with_suffix(".ready")


def _apply(model: dict[int, dict[str, Any]], records: list[dict[str, Any]]) -> None:
    for record in records:  # upsert: the larger ts wins, a tie goes to the incoming record
        old = model.get(record["id"])
        if old is None or record["ts"] >= old["ts"]:
            model[record["id"]] = record


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_processes_upserting_overlapping_keys(tmp_path: Path) -> None:
    uri = str(tmp_path / "table")
    Table.create(uri, name="race", record_key="id", schema=SCHEMA, ordering_field="ts", buckets=2)
    go = tmp_path / "go"
    outs = [tmp_path / "a.json", tmp_path / "b.json"]
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, uri, name, str(go), str(out), str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for name, out, seed in (("a", outs[0], 1), ("b", outs[1], 2))
    ]
    wait_until(
        lambda: all(_ready(out).exists() for out in outs)
        or any(proc.poll() is not None for proc in procs),
        120,
        "both processes to import and open the table",
    )
    go.touch()
    for proc in procs:
        _, stderr = proc.communicate(timeout=200)
        assert proc.returncode == 0, stderr.decode()
    outcomes = [o for out in outs for o in json.loads(out.read_text())]

    failures = [o for o in outcomes if not o["ok"]]
    assert [o for o in failures if o["error"] != "OverlappingCommitConflict"] == []
    assert all("Help:" in o["msg"] for o in failures)
    assert failures, "no write conflicted: the test did not exercise a race"
    succeeded = {o["instant"]: o["records"] for o in outcomes if o["ok"]}
    assert succeeded

    table = Table.open(uri)
    state = table.state()
    completed = state.completed()
    assert {s.instant for s in completed} == set(succeeded)
    for o in failures:
        lost = state.get(o["instant"])
        assert lost is not None and lost.state == Transition.ROLLED_BACK, o
    assert state.rejected == () or all(r.instant not in succeeded for r in state.rejected)

    model: dict[int, dict[str, Any]] = {}
    for instant_state in completed:  # completion order
        _apply(model, succeeded[instant_state.instant])
    final = table.read(with_meta=True)
    got = {r["id"]: {"id": r["id"], "ts": r["ts"], "v": r["v"]} for r in final.to_pylist()}
    assert final.num_rows == len(got)  # one record per key
    assert got == model
    assert set(final.column("_lw_commit_time").to_pylist()) <= set(succeeded)

    lost_instants = {o["instant"] for o in failures}
    leftovers = [
        o.key
        for o in table.storage.list("")
        if not o.key.startswith(".lakewarden/") and any(i in o.key for i in lost_instants)
    ]
    assert leftovers == []


if __name__ == "__main__":
    worker(sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5]))
