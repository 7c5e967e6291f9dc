"""Codec throughput: our single-object framing vs raw fastavro schemaless, same run.

Both sides use the same compiled (parsed) schema and the same record; ours adds the 10-byte
header, the fingerprint lookup, the strict field check and the trailing-bytes check. Timings
alternate ours/raw within each repeat and keep the fastest repeat of each (the least disturbed
by other processes); the goal is that our framing costs at most 10% (ratio <= 1.10).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from io import BytesIO
from typing import Any

from fastavro import schemaless_reader, schemaless_writer

from benchmarks._registry import BenchContext, Result, benchmark
from benchmarks._rounds import rotated_rounds
from lakewarden.events import default_codec, sample_events

GOAL = 1.10
# TaskManifest is the typical event (one per Spark task); Heartbeat is the smallest, where a
# fixed framing cost weighs the most.
EVENTS = ("TaskManifest", "Heartbeat")


@benchmark("codec", "encode+decode of one event: lakewarden codec vs raw fastavro schemaless")
def codec_throughput(ctx: BenchContext) -> Iterator[Result]:
    loops = ctx.scale(20_000, 2_000)
    repeats = ctx.scale(15, 3)
    for name in EVENTS:
        yield _measure(name, loops, repeats)


def _measure(name: str, loops: int, repeats: int) -> Result:
    codec = default_codec()
    parsed = codec.schema(name).parsed
    record = sample_events()[name]
    ours_data = codec.encode(name, record)
    raw_data = _raw_encode(parsed, record)
    assert ours_data[10:] == raw_data  # same body: the comparison is about framing only

    timings = _interleaved(
        {
            "ours_encode": lambda: codec.encode(name, record),
            "raw_encode": lambda: _raw_encode(parsed, record),
            "ours_decode": lambda: codec.decode(ours_data),
            "raw_decode": lambda: schemaless_reader(BytesIO(raw_data), parsed, None),
        },
        loops=loops,
        repeats=repeats,
    )
    best = {key: min(values) for key, values in timings.items()}
    ours = best["ours_encode"] + best["ours_decode"]
    raw = best["raw_encode"] + best["raw_decode"]
    return Result(
        benchmark="codec",
        metric=f"{name} encode+decode",
        unit="µs/event",
        value=ours / 1000,
        baseline=raw / 1000,
        baseline_label="raw fastavro schemaless",
        goal=GOAL,
        details={
            "events_per_s": round(1e9 / ours),
            "raw_events_per_s": round(1e9 / raw),
            "encode_ratio": round(best["ours_encode"] / best["raw_encode"], 3),
            "decode_ratio": round(best["ours_decode"] / best["raw_decode"], 3),
            "median_ratio": round(
                (
                    statistics.median(timings["ours_encode"])
                    + statistics.median(timings["ours_decode"])
                )
                / (
                    statistics.median(timings["raw_encode"])
                    + statistics.median(timings["raw_decode"])
                ),
                3,
            ),
            "message_bytes": len(ours_data),
            "loops": loops,
            "repeats": repeats,
        },
    )


def _raw_encode(parsed: dict[str, Any], record: dict[str, Any]) -> bytes:
    buffer = BytesIO()
    schemaless_writer(buffer, parsed, record)
    return buffer.getvalue()


def _interleaved(
    funcs: dict[str, Callable[[], object]], *, loops: int, repeats: int
) -> dict[str, list[float]]:
    """ns per call of each function, one sample per repeat, the order rotated each repeat."""

    def per_call(func: Callable[[], object]) -> Callable[[int], float]:
        def sample(_round: int) -> float:
            start = time.perf_counter_ns()
            for _ in range(loops):
                func()
            return (time.perf_counter_ns() - start) / loops

        return sample

    return rotated_rounds(repeats, {key: per_call(func) for key, func in funcs.items()})
