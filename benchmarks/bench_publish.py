"""What publishing a Delta log adds to a Python ``Table.write``, same run.

Two copy-on-write tables of the same shape (4 partitions x 4 buckets), one with
``publish_delta`` on: each round inserts the same number of fresh records into both, in
alternating order, so both sides meet the same machine load. Every write of the publishing
table also writes its Delta version (stats read from the new files' footers) and, every ten
versions, a checkpoint. Reported: the median write time of each side and their ratio (goal
from issue 33: at most 1.05 for a Spark insert; a Python write has no Spark job around it, so
its ratio is the upper bound of the overhead).

Run alone with ``python -m benchmarks.bench_publish [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from benchmarks._registry import BenchContext, Result, benchmark
from benchmarks.bench_read import SCHEMA, make_rows
from lakewarden.table.table import Table


def _create(root: Path, name: str, *, publish: bool) -> Table:
    return Table.create(
        str(root / name),
        name=name,
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        ordering_field="ts",
        buckets=4,
        publish_delta=publish,
    )


def _batch(rows: int, round_no: int) -> pa.Table:
    batch = make_rows(rows)
    ids = pc.add(batch.column("id"), pa.scalar(rows * round_no, pa.int64()))
    return batch.set_column(0, "id", ids)


def measure(rows: int, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="lw-bench-publish-") as tmp:
        root = Path(tmp)
        plain = _create(root, "plain", publish=False)
        published = _create(root, "published", publish=True)
        times: dict[str, list[float]] = {"plain": [], "published": [], "publish_step": []}
        hook = published.timeline_log.after_completed
        assert hook is not None

        def timed_hook(entry: Any) -> None:
            started = time.perf_counter()
            hook(entry)
            times["publish_step"].append(time.perf_counter() - started)

        published.timeline_log.after_completed = timed_hook
        for r in range(rounds):
            batch = _batch(rows, r)
            order = [("plain", plain), ("published", published)]
            for name, table in order if r % 2 else reversed(order):
                started = time.perf_counter()
                table.write(batch, "insert")
                times[name].append(time.perf_counter() - started)
        versions = len(list((root / "published" / "_delta_log").glob("*.json")))
    return {
        "rows_per_write": rows,
        "rounds": rounds,
        "plain_median_s": statistics.median(times["plain"]),
        "published_median_s": statistics.median(times["published"]),
        "publish_step_median_s": statistics.median(times["publish_step"]),
        "delta_versions": versions,
    }


@benchmark("publish", "Table.write insert with Delta publishing on vs off, same run")
def bench_publish(ctx: BenchContext) -> Iterator[Result]:
    n = measure(ctx.scale(20_000, 2_000), ctx.scale(30, 10))
    yield Result(
        benchmark="publish",
        metric=f"insert of {n['rows_per_write']} records with publishing on (median)",
        unit="s",
        value=n["published_median_s"],
        baseline=n["plain_median_s"],
        baseline_label="the same insert into a table without publishing (median)",
        goal=1.05,
        details=n,
    )
    yield Result(
        benchmark="publish",
        metric="the publish step alone (one Delta version, inside the write above; median)",
        unit="s",
        value=n["publish_step_median_s"],
        baseline=n["plain_median_s"],
        baseline_label="the insert into a table without publishing (median)",
        goal=0.05,
        details=n,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2k records, 10 rounds")
    args = parser.parse_args()
    for result in bench_publish(BenchContext(quick=args.quick)):
        print(json.dumps(result.as_json(), indent=2))


if __name__ == "__main__":
    main()
