"""How long the local stack takes to start: the Kafka broker and SeaweedFS.

Kafka *cold start* is what a fresh machine pays: format KRaft storage in an empty folder, start
the broker, wait until it answers a metadata request (jars already fetched). Its baseline,
measured in the same run, is a *warm restart* of the same broker on its already formatted
storage, so the ratio shows what formatting and first-time log setup cost. SeaweedFS start is
measured until its S3 API answers a signed request and the bucket exists; its baseline is a
restart on existing data. Each figure is the median of a few runs.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from benchmarks._registry import BenchContext, Result, benchmark
from lakewarden.devstack.kafka import KafkaBroker
from lakewarden.devstack.processes import free_port
from lakewarden.devstack.s3 import SeaweedS3


@benchmark("startup", "local stack start: Kafka cold start vs warm restart, SeaweedFS")
def startup(ctx: BenchContext) -> Iterator[Result]:
    runs = ctx.scale(3, 1)
    with tempfile.TemporaryDirectory(prefix="lakewarden-bench-startup-") as tmp:
        cold, warm = _kafka(Path(tmp), runs)
        yield _result("kafka", "broker start", cold, warm, "warm restart (storage formatted)")
        first, again = _seaweed(Path(tmp), runs)
        yield _result("s3", "SeaweedFS start", first, again, "restart on existing data")


def _kafka(root: Path, runs: int) -> tuple[float, float]:
    cold: list[float] = []
    warm: list[float] = []
    for run in range(runs):
        broker = KafkaBroker(
            home=root / f"kafka-{run}", port=free_port(), controller_port=free_port()
        )
        cold.append(_timed(broker.start, broker.stop))
        warm.append(_timed(broker.start, broker.stop))
    return statistics.median(cold), statistics.median(warm)


def _seaweed(root: Path, runs: int) -> tuple[float, float]:
    first: list[float] = []
    again: list[float] = []
    for run in range(runs):
        endpoint = SeaweedS3(home=root / f"s3-{run}", port=free_port())

        def start(endpoint: SeaweedS3 = endpoint) -> object:
            return endpoint.start(bucket="bench")

        first.append(_timed(start, endpoint.stop))
        again.append(_timed(start, endpoint.stop))
    return statistics.median(first), statistics.median(again)


def _timed(start: Callable[[], object], stop: Callable[[], None]) -> float:
    began = time.perf_counter()
    start()
    elapsed = time.perf_counter() - began
    stop()
    return elapsed


def _result(name: str, metric: str, value: float, baseline: float, label: str) -> Result:
    return Result(
        benchmark="startup",
        metric=f"{name}: {metric}",
        unit="s",
        value=value,
        baseline=baseline,
        baseline_label=label,
    )
