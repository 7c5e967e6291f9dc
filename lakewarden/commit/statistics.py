"""Counters and durations of a committer, serialised in Hadoop's IOStatistics JSON shape.

Hadoop names a duration statistic ``<name>``, counts its calls in ``counters[<name>]`` and its
failures in ``counters[<name>.failures]``, and keeps ``minimums[<name>.min]``,
``maximums[<name>.max]`` (milliseconds) and ``meanstatistics[<name>.mean] = {samples, sum}``.
We do the same, so the ``iostatistics`` of our manifests and ``_SUCCESS`` read like Hadoop's.
Store operations are named ``op_<operation>``; stages by their Hadoop-style stage name.

Thread-safe; one lock per update. Batched store calls record N samples with the batch's total
time (the mean is right; min and max are then per batch, not per call).
"""

from __future__ import annotations

import threading
from typing import Any

IOStatisticsJson = dict[str, dict[str, Any]]


class CommitStatistics:
    """Mutable, thread-safe statistics; ``snapshot()`` gives the Hadoop JSON shape."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, int] = {}
        self._min_ms: dict[str, float] = {}
        self._max_ms: dict[str, float] = {}
        self._mean: dict[str, tuple[int, float]] = {}

    def increment(self, name: str, by: int = 1) -> None:
        with self._lock:
            self._counters[name] = self._counters.get(name, 0) + by

    def record(self, name: str, seconds: float, *, failed: bool = False, samples: int = 1) -> None:
        """Record ``samples`` calls of ``name`` that took ``seconds`` in total."""
        if samples <= 0:
            return
        ms = seconds * 1000.0
        with self._lock:
            self._counters[name] = self._counters.get(name, 0) + samples
            if failed:
                key = name + ".failures"
                self._counters[key] = self._counters.get(key, 0) + 1
            count, total = self._mean.get(name, (0, 0.0))
            self._mean[name] = (count + samples, total + ms)
            self._min_ms[name] = min(self._min_ms.get(name, ms), ms)
            self._max_ms[name] = max(self._max_ms.get(name, ms), ms)

    def counter(self, name: str) -> int:
        with self._lock:
            return self._counters.get(name, 0)

    def counters(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counters)

    def total_ms(self, name: str) -> float:
        with self._lock:
            return self._mean.get(name, (0, 0.0))[1]

    def snapshot(self) -> IOStatisticsJson:
        """The statistics as Hadoop's ``IOStatisticsSnapshot`` JSON."""
        with self._lock:
            return {
                "counters": dict(sorted(self._counters.items())),
                "gauges": {},
                "minimums": {f"{k}.min": round(v, 3) for k, v in sorted(self._min_ms.items())},
                "maximums": {f"{k}.max": round(v, 3) for k, v in sorted(self._max_ms.items())},
                "meanstatistics": {
                    f"{k}.mean": {"samples": n, "sum": round(total, 3)}
                    for k, (n, total) in sorted(self._mean.items())
                },
            }


def empty_iostatistics() -> IOStatisticsJson:
    return {"counters": {}, "gauges": {}, "minimums": {}, "maximums": {}, "meanstatistics": {}}


def aggregate_iostatistics(*parts: IOStatisticsJson) -> IOStatisticsJson:
    """Hadoop's aggregation of IOStatistics snapshots: counters and mean statistics (samples,
    sum) add up, minimums take the least, maximums the greatest; gauges add up."""
    out = empty_iostatistics()
    for part in parts:
        for name, value in part.get("counters", {}).items():
            out["counters"][name] = out["counters"].get(name, 0) + int(value)
        for name, value in part.get("gauges", {}).items():
            out["gauges"][name] = out["gauges"].get(name, 0) + value
        for name, value in part.get("minimums", {}).items():
            known = out["minimums"].get(name)
            out["minimums"][name] = value if known is None else min(known, value)
        for name, value in part.get("maximums", {}).items():
            known = out["maximums"].get(name)
            out["maximums"][name] = value if known is None else max(known, value)
        for name, mean in part.get("meanstatistics", {}).items():
            known = out["meanstatistics"].get(name, {"samples": 0, "sum": 0.0})
            out["meanstatistics"][name] = {
                "samples": known["samples"] + int(mean.get("samples", 0)),
                "sum": round(known["sum"] + float(mean.get("sum", 0.0)), 3),
            }
    return {kind: dict(sorted(values.items())) for kind, values in out.items()}
