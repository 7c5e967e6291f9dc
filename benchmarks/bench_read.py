"""``lakewarden.read`` of a 1M-row table against ``pyarrow.parquet.read_table`` over the same files.

The table (4 partitions x 4 buckets = 16 base files) is written through ``Table.write`` in a
temporary directory. Both readers then read the same user columns of the same files,
alternating, several times; the medians are compared (goal: lakewarden within 1.2x). Opening
the table, loading the timeline and computing the snapshot are inside lakewarden's time.

Run alone with ``python -m benchmarks.bench_read [--quick]``; ``make bench`` runs it through
the registry.
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

import lakewarden
from benchmarks._registry import BenchContext, Result, benchmark
from benchmarks._rounds import rotated_rounds
from lakewarden.api.table import Table

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("region", pa.string()),
        ("ts", pa.int64()),
        ("amount", pa.float64()),
        ("customer", pa.string()),
    ]
)
REGIONS = ["eu", "us", "apac", "latam"]


def make_rows(n: int) -> pa.Table:
    """``n`` records, built with Arrow kernels (no per-row Python)."""
    ids = pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), n)), 1)
    region_index = pc.divide(pc.multiply(ids, 7919), 13).cast(pa.int64())
    region_index = pc.subtract(region_index, pc.multiply(pc.divide(region_index, 4), 4))
    regions = pc.take(pa.array(REGIONS), region_index)
    customers = pc.binary_join_element_wise(
        "customer-", pc.cast(pc.multiply(ids, 31), pa.string()), ""
    )
    return pa.table(
        [ids, regions, pc.multiply(ids, 3), pc.divide(pc.cast(ids, pa.float64()), 7.0), customers],
        schema=SCHEMA,
    )


def build_table(root: Path, rows: int) -> tuple[Table, float]:
    """The benchmark table and how long writing it took (seconds)."""
    table = Table.create(
        str(root / "orders"),
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        ordering_field="ts",
        buckets=4,
    )
    data = make_rows(rows)
    start = time.perf_counter()
    table.write(data, operation="insert")
    return table, time.perf_counter() - start


def _elapsed(func: Callable[[], Any]) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def measure(rows: int, repeats: int) -> dict[str, Any]:
    """Write a table of ``rows`` records, then time both readers ``repeats`` times each."""
    root = Path(tempfile.mkdtemp(prefix="lakewarden-bench-read-"))
    try:
        table, write_s = build_table(root, rows)
        paths = [table.storage.local_path(s.path) for s in table.snapshot().base_files()]
        columns = SCHEMA.names

        def ours() -> pa.Table:
            return lakewarden.read(table.uri, columns=columns)

        def baseline() -> pa.Table:
            return pq.read_table(paths, columns=columns, partitioning=None)

        assert ours().num_rows == baseline().num_rows == rows
        # interleaved, the order alternating, so load on the machine hits both alike
        times = rotated_rounds(
            repeats, {"ours": lambda _: _elapsed(ours), "base": lambda _: _elapsed(baseline)}
        )
        ours_s, base_s = times["ours"], times["base"]
        return {
            "rows": rows,
            "files": len(paths),
            "write_s": write_s,
            "lakewarden_s": statistics.median(ours_s),
            "pyarrow_s": statistics.median(base_s),
            "lakewarden_all_s": ours_s,
            "pyarrow_all_s": base_s,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


@benchmark("read", "lakewarden.read of a 1M-row table vs pyarrow.parquet.read_table, same files")
def bench_read(ctx: BenchContext) -> Iterable[Result]:
    numbers = measure(ctx.scale(1_000_000, 100_000), ctx.scale(7, 3))
    yield Result(
        benchmark="read",
        metric=f"read {numbers['rows']:,} rows ({numbers['files']} files)",
        unit="s",
        value=numbers["lakewarden_s"],
        baseline=numbers["pyarrow_s"],
        baseline_label="pyarrow.parquet.read_table over the same files",
        goal=1.2,
        details={k: v for k, v in numbers.items() if k not in ("lakewarden_s", "pyarrow_s")},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k rows, 3 repeats")
    args = parser.parse_args()
    ctx = BenchContext(quick=args.quick)
    for result in bench_read(ctx):
        print(json.dumps(result.as_json(), indent=2))


if __name__ == "__main__":
    main()
