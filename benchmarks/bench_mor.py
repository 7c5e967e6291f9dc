"""Merge-on-read against copy-on-write, same data, same run.

1. **Upsert 1%**: a table of 2M records (4 partitions x 4 buckets = 16 file groups) written
   once as copy-on-write and once as merge-on-read; then upserts of 1% of the keys (spread
   over every file group) alternate between the two tables. Copy-on-write rewrites every base
   file it touches; merge-on-read appends one log block per file group. Time and bytes written
   (goal: merge-on-read at least 5x faster).
2. **Read with 10 pending deltacommits**: after ten such upserts, ``Table.read`` of the
   merge-on-read table against the read of the same table after compaction (goal: at most
   1.5x). Both are timed after the compaction, in alternation: the snapshot before it is
   read by time travel (``as_of`` the last deltacommit: the same base and log files, the same
   merge), so both sides meet the same machine load. Each timed read is the first read of a
   freshly opened ``Table`` (opened outside the timing), so the log-file cache a ``Table``
   keeps across reads (``lakewarden.table.log_cache``) starts empty: that is the figure
   the goal is judged by. The same alternation on one ``Table`` whose cache is warm is
   reported beside it (``read_pending_warm_s``); the compacted read has no equivalent cache
   (it reads its Parquet files, footers included, on every read). (The reads before the
   compaction are still timed, ``read_pending_before_compaction_s``: on a shared machine the
   load moves in the minute between them and the baseline.) The CPU time of the cold reads
   (``read_pending_cpu_s``, ``read_after_compaction_cpu_s``, every thread of the process)
   is reported too: a loaded machine inflates wall times, and the two sides unequally.
3. **Compaction vs a pyarrow rewrite**: the compaction that merges those file groups against
   ``pyarrow.parquet`` reading and writing the same number of records in the same files
   (goal: at most 1.2x).

Run alone with ``python -m benchmarks.bench_mor [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks._registry import BenchContext, Result, benchmark
from benchmarks.bench_read import SCHEMA, make_rows
from lakewarden.api.table import Table

UPSERT_FRACTION = 0.01
PENDING_DELTAS = 10
READ_ROUNDS = 5  # reads of each side, alternating


def _create(root: Path, name: str, table_type: str) -> Table:
    return Table.create(
        str(root / name),
        name=name,
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        ordering_field="ts",
        buckets=4,
        table_type=table_type,  # type: ignore[arg-type]
    )


def _upsert_batch(rows: int, round_no: int) -> pa.Table:
    """1% of the keys, spread evenly over the table, with a larger ordering value."""
    count = max(1, int(rows * UPSERT_FRACTION))
    step = rows // count
    base = make_rows(rows).take(pa.array(range(round_no % step, rows, step))[:count])
    ts = pc.add(base.column("ts"), pa.scalar(10 * rows * (round_no + 1), pa.int64()))
    return base.set_column(base.schema.get_field_index("ts"), "ts", ts)


def _written_bytes(table: Table, instant: str) -> int:
    state = table.state().get(instant)
    assert state is not None and state.commit is not None
    return sum(s.size_bytes for s in state.commit.write_stats)


def _timed(func: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = func()
    return time.perf_counter() - start, result


def measure(rows: int, rounds: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="lakewarden-bench-mor-"))
    try:
        data = make_rows(rows)
        cow, mor = _create(root, "cow", "cow"), _create(root, "mor", "merge_on_read")
        cow.write(data, "insert")
        mor.write(data, "insert")
        times: dict[str, list[float]] = {"cow": [], "mor": []}
        written: dict[str, list[int]] = {"cow": [], "mor": []}
        for round_no in range(max(rounds, PENDING_DELTAS)):
            batch = _upsert_batch(rows, round_no)
            order = (("cow", cow), ("mor", mor)) if round_no % 2 else (("mor", mor), ("cow", cow))
            for label, table in order:
                if label == "cow" and round_no >= rounds:
                    continue  # the copy-on-write side only needs ``rounds`` samples
                elapsed, result = _timed(lambda t=table, b=batch: t.write(b, "upsert"))
                times[label].append(elapsed)
                written[label].append(_written_bytes(table, result.instant))
        read_before_s = [_timed(Table.open(mor.storage.uri).read)[0] for _ in range(3)]
        pending = mor.snapshot().as_of
        expected = cow.read().num_rows
        numbers: dict[str, Any] = {
            "rows": rows,
            "upsert_rows": len(_upsert_batch(rows, 0)),
            "cow_upsert_s": statistics.median(times["cow"]),
            "mor_upsert_s": statistics.median(times["mor"]),
            "cow_bytes": int(statistics.median(written["cow"])),
            "mor_bytes": int(statistics.median(written["mor"])),
            "read_pending_before_compaction_s": statistics.median(read_before_s),
            "pending_deltacommits": PENDING_DELTAS,
        }
        numbers.update(_compaction(mor, expected, pending))
        return numbers
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _compaction(mor: Table, expected_rows: int, pending: str | None) -> dict[str, Any]:
    """Compact every file group, time it; then time the read after it against the read of
    the snapshot before it (``pending``), alternately; then a pyarrow rewrite of the same
    number of records in the same number of files."""
    slices = [s for s in mor.snapshot().slices.values() if s.log_files]
    instant = mor.schedule_compaction()
    assert instant is not None
    compact_s, _ = _timed(lambda: mor.run_table_service(instant))
    assert mor.read().num_rows == expected_rows
    before = mor.read(as_of=pending)
    assert before.num_rows == expected_rows and before.sort_by("id").equals(
        mor.read().sort_by("id")
    )
    cold = _alternate_reads(lambda: Table.open(mor.storage.uri), pending)
    warm_table = Table.open(mor.storage.uri)
    warm_table.read(as_of=pending)  # fills its log-file cache
    warm = _alternate_reads(lambda: warm_table, pending)
    paths = [mor.storage.local_path(s.path) for s in mor.snapshot().base_files()]
    scratch = Path(tempfile.mkdtemp(prefix="lakewarden-bench-rewrite-"))
    try:

        def rewrite() -> None:
            for i, path in enumerate(paths):
                pq.write_table(pq.read_table(path, partitioning=None), scratch / f"{i}.parquet")

        rewrite_s, _ = _timed(rewrite)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "compacted_file_groups": len(slices),
        "compaction_s": compact_s,
        "read_pending_s": statistics.median(cold["pending"]),
        "read_after_compaction_s": statistics.median(cold["compacted"]),
        "read_ratios": [p / c for p, c in zip(cold["pending"], cold["compacted"], strict=True)],
        "read_pending_cpu_s": statistics.median(cold["pending_cpu"]),
        "read_after_compaction_cpu_s": statistics.median(cold["compacted_cpu"]),
        "read_pending_warm_s": statistics.median(warm["pending"]),
        "read_after_compaction_warm_s": statistics.median(warm["compacted"]),
        "read_ratios_warm": [
            p / c for p, c in zip(warm["pending"], warm["compacted"], strict=True)
        ],
        "pyarrow_rewrite_s": rewrite_s,
    }


def _alternate_reads(table: Callable[[], Table], pending: str | None) -> dict[str, list[float]]:
    """``READ_ROUNDS`` reads of each side, alternating which goes first; ``table()`` gives
    the table each read is made on (opened before the timing starts). Besides the wall
    times (``pending``, ``compacted``), the CPU time of each read (``pending_cpu``,
    ``compacted_cpu``: every thread of the process), which load inflates far less."""
    timings: dict[str, list[float]] = {
        "pending": [],
        "compacted": [],
        "pending_cpu": [],
        "compacted_cpu": [],
    }
    for round_no in range(READ_ROUNDS):
        sides = [("pending", pending), ("compacted", None)]
        for label, as_of in sides if round_no % 2 else reversed(sides):
            reader = table()
            cpu = time.process_time()
            timings[label].append(_timed(lambda r=reader, a=as_of: r.read(as_of=a))[0])
            timings[f"{label}_cpu"].append(time.process_time() - cpu)
    return timings


@benchmark("mor", "merge-on-read vs copy-on-write: 1% upserts, reads with pending deltas")
def bench_mor(ctx: BenchContext) -> Iterable[Result]:
    n = measure(ctx.scale(2_000_000, 200_000), ctx.scale(3, 2))
    details = dict(n)
    yield Result(
        benchmark="mor",
        metric=f"upsert {n['upsert_rows']:,} of {n['rows']:,} rows: copy-on-write / merge-on-read",
        unit="x",
        value=n["cow_upsert_s"] / n["mor_upsert_s"],
        baseline=1.0,
        baseline_label="merge-on-read upsert time (ratio > 1: merge-on-read is faster)",
        lower_is_better=False,
        goal=5.0,
        details=details,
    )
    yield Result(
        benchmark="mor",
        metric="bytes written by one 1% upsert: merge-on-read",
        unit="bytes",
        value=float(n["mor_bytes"]),
        baseline=float(n["cow_bytes"]),
        baseline_label="bytes written by the same upsert on copy-on-write",
    )
    yield Result(
        benchmark="mor",
        metric=f"read with {n['pending_deltacommits']} pending deltacommits",
        unit="s",
        value=n["read_pending_s"],
        baseline=n["read_after_compaction_s"],
        baseline_label="read of the same table after compaction (each the first read of a "
        "freshly opened table)",
        goal=1.5,
    )
    yield Result(
        benchmark="mor",
        metric=f"read with {n['pending_deltacommits']} pending deltacommits, log cache warm",
        unit="s",
        value=n["read_pending_warm_s"],
        baseline=n["read_after_compaction_warm_s"],
        baseline_label="read of the same table after compaction (no equivalent cache)",
    )
    yield Result(
        benchmark="mor",
        metric=f"compaction of {n['compacted_file_groups']} file groups",
        unit="s",
        value=n["compaction_s"],
        baseline=n["pyarrow_rewrite_s"],
        baseline_label="pyarrow read + write of the same records in as many files",
        goal=1.2,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200k rows")
    args = parser.parse_args()
    for result in bench_mor(BenchContext(quick=args.quick)):
        print(json.dumps(result.as_json(), indent=2))


if __name__ == "__main__":
    main()
