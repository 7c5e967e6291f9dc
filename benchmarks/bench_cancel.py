"""cancel-manager: ``CancelRequest`` -> ``CancelResult`` latency against the Kafka floor.

The services run as in production (timeline-lock, heartbeat-monitor, cancel-manager, one
process each); a local table holds one cancellable clustering plan. After the first request
(``accepted``) every request is answered ``already_requested``: each one still takes the
table lock from timeline-lock, reloads the timeline and publishes its result, which is the
whole path a cancel request takes. The floor is one raw confluent-kafka produce->consume hop
(the ``lock`` benchmark's). A cancel request needs at least two hops (request, result) plus
the lock's own round trip, so the ratio to one hop has a floor of about 3 (goal: p50 <= 3x).

Run alone with ``python -m benchmarks cancel [--quick]``.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from benchmarks._registry import BenchContext, Result, benchmark
from benchmarks._rounds import rotated_rounds
from benchmarks.bench_lock import RAW, _quantile, _raw_round_trip
from lakewarden.clients import CancelClient
from lakewarden.events import ensure_topics
from lakewarden.settings import Settings
from lakewarden.table import Table
from lakewarden.table.coordinator import EmbeddedCoordinator
from services._common.process import ServiceProcess

_MODULES = ("services.timeline_lock", "services.heartbeat_monitor", "services.cancel_manager")
_SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string())])


def _table(root: Path) -> tuple[Table, str]:
    table = Table.create(
        str(root / "orders"),
        name="orders",
        record_key="id",
        schema=_SCHEMA,
        partition_by=["region"],
        coordinator=EmbeddedCoordinator(),
    )
    table.write(pa.table({"id": [1, 2, 3], "region": ["eu"] * 3}, schema=_SCHEMA))
    instant = table.schedule_clustering(sort_by=["id"], cancellable=True)
    assert instant is not None
    return table, str(instant)


@benchmark("cancel", "CancelRequest -> CancelResult through cancel-manager vs the Kafka floor")
def cancel_benchmark(ctx: BenchContext) -> Iterator[Result]:
    base = ctx.kafka_settings()
    kafka = base.kafka.model_copy(update={"topic_prefix": f"lwbench{uuid.uuid4().hex[:6]}."})
    settings: Settings = base.model_copy(update={"kafka": kafka})
    ensure_topics(settings)
    ensure_topics(settings, specs=(RAW,))
    home = Path(tempfile.mkdtemp(prefix="lakewarden-bench-cancel-"))
    services = [
        ServiceProcess(m, settings, home=home / m.rsplit(".", 1)[-1], log_level="WARNING")
        for m in _MODULES
    ]
    try:
        for service in services:
            service.home.mkdir(parents=True)
            service.start()
        table, instant = _table(home)
        yield _latency(settings, table, instant, samples=ctx.scale(200, 30))
    finally:
        for service in reversed(services):
            service.stop()
        shutil.rmtree(home, ignore_errors=True)


def _latency(settings: Settings, table: Table, instant: str, *, samples: int) -> Result:
    raw_trip, close_raw = _raw_round_trip(settings)
    client = CancelClient(settings, producer_id="bench")

    def ask() -> float:
        start = time.perf_counter()
        reply = client.request_cancel(
            table.table_id, instant, table_uri=table.uri, requester="bench", reason="bench"
        )
        assert reply.ok, reply
        return (time.perf_counter() - start) * 1000

    def hop() -> float:
        start = time.perf_counter()
        raw_trip()
        return (time.perf_counter() - start) * 1000

    try:
        for _ in range(5):  # warm up: the first request opens the table and takes its lease
            ask()
            hop()
        times = rotated_rounds(samples, {"floor": lambda _: hop(), "ours": lambda _: ask()})
    finally:
        client.close()
        close_raw()
    ours, floor = times["ours"], times["floor"]
    return Result(
        benchmark="cancel",
        metric="CancelRequest -> CancelResult p50 (request_cancel, already requested)",
        unit="ms",
        value=_quantile(ours, 0.5),
        baseline=_quantile(floor, 0.5),
        baseline_label="raw Kafka round trip (the floor)",
        goal=3.0,
        details={
            "samples": len(ours),
            "p99_ms": round(_quantile(ours, 0.99), 3),
            "floor_p99_ms": round(_quantile(floor, 0.99), 3),
        },
    )
