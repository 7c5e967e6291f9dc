"""A writer process of the lake benchmark (run as a script by ``bench_lake``).

    python -m benchmarks._lake_writer steady SPEC_JSON   commit at a steady rate; print latencies
    python -m benchmarks._lake_writer doomed URI         begin a write, beat, print ready, hang

``steady``: SPEC_JSON names the tables to write through the services (``uris``), a directory
for this writer's embedded twin tables (``twins``), the commit rate per second (``rate``) and
how long (``seconds``). Each tick commits one small write to the next table through the
services (timeline-lock's lease, heartbeats to heartbeat-monitor, job commit by
job-committer: ``Table.write`` with Kafka settings), then the same write to its embedded twin
(``EmbeddedCoordinator``, committed in-process); both are timed. Prints one JSON line:
``{"service": [s, ...], "embedded": [s, ...], "failed": n}``.

``doomed``: begins an instant on URI through the Kafka coordinator with its heartbeat running,
prints ``ready <instant>`` and sleeps until killed (heartbeat-monitor's detection lag).
Kafka and heartbeat settings come from the environment (``LAKEWARDEN_*``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pyarrow as pa

from lakewarden.errors import LakewardenError
from lakewarden.settings import Settings
from lakewarden.table import CleanPolicy, EmbeddedCoordinator, Table
from lakewarden.table.transaction import WriteTransaction

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
KEEP_ONE = CleanPolicy(commits_retained=1, retention_window_s=0)


def row(n: int) -> pa.Table:
    return pa.Table.from_pylist([{"id": 1, "v": str(n)}], schema=SCHEMA)


def steady(spec: dict[str, object]) -> None:
    settings = Settings()
    uris = [str(u) for u in spec["uris"]]  # type: ignore[attr-defined]
    twins_root = Path(str(spec["twins"]))
    rate = float(spec["rate"])  # type: ignore[arg-type]
    seconds = float(spec["seconds"])  # type: ignore[arg-type]
    tables = [Table.open(uri, settings=settings) for uri in uris]
    twins = [
        Table.create(
            str(twins_root / f"twin{i}"),
            name=f"twin{i}",
            record_key="id",
            schema=SCHEMA,
            clean_policy=KEEP_ONE,
            coordinator=EmbeddedCoordinator(),
        )
        for i in range(len(uris))
    ]
    service: list[float] = []
    embedded: list[float] = []
    failed = 0
    started = time.monotonic()
    n = 0
    while (now := time.monotonic()) - started < seconds:
        due = started + n / rate
        if due > now:
            time.sleep(due - now)
        i = n % len(tables)
        t0 = time.perf_counter()
        try:
            tables[i].write(row(n))
            service.append(time.perf_counter() - t0)
        except LakewardenError as err:
            failed += 1
            print(f"service write failed: {err}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        twins[i].write(row(n))
        embedded.append(time.perf_counter() - t0)
        n += 1
    print(json.dumps({"service": service, "embedded": embedded, "failed": failed}), flush=True)


def doomed(uri: str) -> None:
    table = Table.open(uri, settings=Settings())
    txn = WriteTransaction.begin(
        table.timeline_log, table.coordinator, table.table_id, operation="upsert", actor="doomed"
    )
    with txn.heartbeat():
        print("ready", txn.instant, flush=True)
        time.sleep(3600)


if __name__ == "__main__":
    if sys.argv[1] == "steady":
        steady(json.loads(sys.argv[2]))
    else:
        doomed(sys.argv[2])
