"""A no-op faust agent on one topic: what faust itself spends per message (bench_heartbeat).

    python benchmarks/_faust_floor.py BOOTSTRAP TOPIC DATADIR

Prints the number of messages consumed so far, twice a second, until SIGTERM. faust's worker
with the settings the services had when they ran on faust (memory store, web off, acks=all,
a 6 s session): the baseline heartbeat-monitor's plain loop is measured against. faust is a
dev dependency for this alone (pyproject.toml).
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import faust


def main() -> None:
    bootstrap, topic, datadir = sys.argv[1:4]
    app = faust.App(
        f"floor-{uuid.uuid4().hex[:6]}.faust-floor",
        broker=[f"kafka://{server}" for server in bootstrap.split(",")],
        autodiscover=False,
        datadir=str(Path(datadir) / "faust" / "faust-floor"),
        store="memory://",
        topic_partitions=6,
        topic_replication_factor=1,
        table_standby_replicas=0,
        producer_acks=-1,
        producer_linger=0.0,
        broker_session_timeout=6.0,
        broker_heartbeat_interval=1.0,
        consumer_auto_offset_reset="latest",
        web_enabled=False,
    )
    Path(app.conf.datadir).parent.mkdir(parents=True, exist_ok=True)  # faust makes only the leaf
    source = app.topic(topic, key_serializer="raw", value_serializer="raw")
    consumed = [0]

    async def noop(stream: faust.StreamT[Any]) -> None:
        async for _ in stream:
            consumed[0] += 1

    async def report() -> None:
        print(consumed[0], flush=True)

    app.agent(source)(noop)
    app.timer(interval=0.5)(report)
    worker = faust.Worker(app, loglevel="WARNING", quiet=True, redirect_stdouts=False)
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
