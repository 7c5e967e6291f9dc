"""cancel-manager: ``CancelRequest`` -> ``CancelResult`` latency against the Kafka floor.

The services run as in production (timeline-lock, heartbeat-monitor, cancel-manager, one
process each); a local table holds one cancellable clustering plan. After the first request
(``accepted``) every request is answered ``already_requested``: each one still takes the
table lock from timeline-lock, reloads the timeline and publishes its result, which is the
whole path a cancel request takes. Two floors (``_echo_floor``), measured sample by sample
with the requests, the order rotated: one raw confluent-kafka produce->consume hop, and the
echo round trip (request -> a do-nothing echo process -> reply). A cancel request is two echo
round trips at least: its own (request, result) and, inside it, the table lock's acquire
(request, grant); four hops. So its ratio to one hop cannot be under 4 with nothing else
done (the goal, p50 <= 3x "the Kafka round-trip floor", can be met only with that floor read
as the echo round trip: <= 1.5x two echo round trips), and to the echo round trip not
under 2.

Beside the latencies, the CPU each process spends per request (``cpu_ms_per_request_*``:
cancel-manager, timeline-lock, heartbeat-monitor from ``/proc/<pid>/stat``, each one's loop
thread (``*_loop``) from its main thread's, the client's own process from
``time.process_time``), over requests sent back to back after the rounds. On a
shared machine it says whether a change to the path is real, better than the wall-time
ratio does: waiting for a core costs no CPU.

Run alone with ``python -m benchmarks cancel [--quick]``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa

from benchmarks._echo_floor import FLOOR_TOPICS, EchoService, echo, hop, quantile, timed
from benchmarks._registry import BenchContext, Result, benchmark
from benchmarks._rounds import rotated_rounds
from lakewarden.clients import CancelClient
from lakewarden.events import ensure_topics
from lakewarden.settings import Settings
from lakewarden.table import Table
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden_services._common.process import ServiceProcess

_MODULES = (
    "lakewarden_services.timeline_lock",
    "lakewarden_services.heartbeat_monitor",
    "lakewarden_services.cancel_manager",
)
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
    ensure_topics(settings, specs=FLOOR_TOPICS)
    home = Path(tempfile.mkdtemp(prefix="lakewarden-bench-cancel-"))
    services = [
        ServiceProcess(m, settings, home=home / m.rsplit(".", 1)[-1], log_level="WARNING")
        for m in _MODULES
    ]
    echo_service = EchoService(settings, home=home / "echo")
    try:
        for service in services:
            service.home.mkdir(parents=True)
            service.start()
        echo_service.start()
        table, instant = _table(home)
        pids = {m.rsplit(".", 1)[-1]: s.pid for m, s in zip(_MODULES, services, strict=True)}
        yield from _latency(settings, table, instant, samples=ctx.scale(200, 30), pids=pids)
    finally:
        echo_service.stop()
        for service in reversed(services):
            service.stop()
        shutil.rmtree(home, ignore_errors=True)


def _cpu_s(stat_path: str) -> float:
    """CPU seconds (user + system) of the process or thread whose ``stat`` file this is."""
    with open(stat_path) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _service_cpu_s(pids: dict[str, int | None]) -> dict[str, float]:
    """Per service: the CPU of its whole process (every thread: librdkafka's too) and of its
    main thread alone, which runs its loop (the Python work of each request)."""
    used: dict[str, float] = {}
    for name, pid in pids.items():
        if pid is not None:
            used[name] = _cpu_s(f"/proc/{pid}/stat")
            used[f"{name}_loop"] = _cpu_s(f"/proc/{pid}/task/{pid}/stat")
    return used


def _cpu_per_request(
    ask: Callable[[], None], pids: dict[str, int | None], *, requests: int
) -> dict[str, float]:
    """Milliseconds of CPU per request of each service process and of its loop thread (and
    of this, the client's, process), over ``requests`` back to back. CPU time is what a
    change to the request path saves; a loaded machine distorts it far less than wall time
    (a wait for a core costs none), though librdkafka's threads spend more per message when
    their wake-ups are spread out. It includes each process's idle polling over the phase
    (heartbeat-monitor, not on the path, shows how much)."""
    before = _service_cpu_s(pids)
    client_before = time.process_time()
    for _ in range(requests):
        ask()
    used = {name: s - before[name] for name, s in _service_cpu_s(pids).items()}
    used["client"] = time.process_time() - client_before
    return {f"cpu_ms_per_request_{name}": round(s * 1000 / requests, 3) for name, s in used.items()}


def _latency(
    settings: Settings,
    table: Table,
    instant: str,
    *,
    samples: int,
    pids: dict[str, int | None],
) -> Iterator[Result]:
    hop_trip, close_hop = hop(settings)
    echo_trip, close_echo = echo(settings)
    client = CancelClient(settings, producer_id="bench")

    def ask() -> None:
        reply = client.request_cancel(
            table.table_id, instant, table_uri=table.uri, requester="bench", reason="bench"
        )
        assert reply.ok, reply

    try:
        for _ in range(5):  # warm up: the first request opens the table and takes its lease
            ask()
            hop_trip()
            echo_trip()
        times = rotated_rounds(
            samples,
            {
                "hop": lambda _: timed(hop_trip),
                "echo": lambda _: timed(echo_trip),
                "ours": lambda _: timed(ask),
            },
        )
        cpu = _cpu_per_request(ask, pids, requests=3 * samples)
    finally:
        client.close()
        close_hop()
        close_echo()
    ours = times["ours"]
    details = {
        "samples": len(ours),
        "p99_ms": round(quantile(ours, 0.99), 3),
        "hop_p50_ms": round(quantile(times["hop"], 0.5), 3),
        "hop_p99_ms": round(quantile(times["hop"], 0.99), 3),
        "echo_p50_ms": round(quantile(times["echo"], 0.5), 3),
        "echo_p99_ms": round(quantile(times["echo"], 0.99), 3),
        **cpu,
    }
    metric = "CancelRequest -> CancelResult p50 (request_cancel, already requested)"
    yield Result(
        benchmark="cancel",
        metric=metric,
        unit="ms",
        value=quantile(ours, 0.5),
        baseline=quantile(times["hop"], 0.5),
        baseline_label="one raw Kafka hop (the floor)",
        goal=3.0,
        details=details,
    )
    yield Result(
        benchmark="cancel",
        metric=f"{metric} vs echo",
        unit="ms",
        value=quantile(ours, 0.5),
        baseline=quantile(times["echo"], 0.5),
        baseline_label="echo round trip (two hops through a do-nothing process)",
        goal=3.0,
        details=details,
    )
