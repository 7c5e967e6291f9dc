"""A no-op faust agent on one topic: what faust itself spends per message (bench_heartbeat).

    python benchmarks/_faust_floor.py BOOTSTRAP TOPIC DATADIR

Prints the number of messages consumed so far, twice a second, until SIGTERM. faust's worker
with the settings services use (``lakewarden_services._common.make_app``: memory store, web off).
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import faust

from lakewarden.settings import KafkaSettings, Settings
from lakewarden_services._common.app import make_app


def main() -> None:
    bootstrap, topic, datadir = sys.argv[1:4]
    settings = Settings(
        kafka=KafkaSettings(
            bootstrap_servers=bootstrap, topic_prefix=f"floor-{uuid.uuid4().hex[:6]}."
        ),
        state_dir=datadir,
    )
    app = make_app("faust-floor", settings, partitions=6, consumer_auto_offset_reset="latest")
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
