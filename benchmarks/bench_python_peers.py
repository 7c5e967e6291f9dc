"""lakewarden from plain Python beside delta-rs (the ``deltalake`` package), no Spark.

The input is the ``spark`` benchmark's rows (``bench_spark.COLUMNS``: N rows x 10 columns,
partitioned by ``region``, 4 values) built with pyarrow in memory before anything is timed.
Per round, the two variants in rotated order (``_rounds``), each on a fresh table:

- **insert** all rows: ``Table.write(data, "insert")`` (4 buckets per partition) vs
  ``write_deltalake(uri, data, mode="append", partition_by=["region"])``;
- **upsert** 10% of the keys with a newer ``ts``: ``Table.write(changed, "upsert")`` vs
  ``DeltaTable(uri).merge(changed, "t.id = s.id").when_matched_update_all()
  .when_not_matched_insert_all().execute()``;
- **read** the table after the upsert: ``lakewarden.read(uri)`` vs
  ``DeltaTable(uri).to_pyarrow_table()``;
- **small insert**: ``SMALL_ROWS`` rows appended to a table of their own, ``SMALL_WRITES``
  times in a row after one untimed first write (it creates the Delta table), the median
  write: the fixed cost of a write, which a user writing small batches feels;
- **small insert into the big table**: the same ``SMALL_WRITES`` appends of ``SMALL_ROWS``
  rows, timed after the read, into the table that holds all N rows: whether a small write's
  cost grows with the table it lands in;
- **small insert series**: ``SERIES_WRITES`` appends of ``SMALL_ROWS`` rows in a row into a
  table of their own, through one kept handle on each side (a ``Table``; a ``DeltaTable``
  passed to ``write_deltalake``), the mean write: what a pipeline writing small batches
  feels as the table's history grows (the last quarter's mean is in the details);
- **small insert with fsync off** (lakewarden only, a diagnostic): the small inserts again
  with ``os.fsync`` a no-op, against delta-rs's small insert, which calls no fsync: how much
  of the gap is the durability a lakewarden write has when it returns;
- **small insert with one bucket per partition** (lakewarden only, a diagnostic): the small
  inserts again into a table created with ``buckets=1``, which writes one file per partition
  as delta-rs does (against delta-rs's small insert): how much of the gap is the bucket
  layout. It is a table setting, not a free one: an upsert of such a table rewrites every
  file of each partition it touches.

Each figure is lakewarden's median seconds against delta-rs's median in the same run (below
1.0: lakewarden ahead); bytes on disk after the upsert are a figure of their own. The details
also give the median CPU seconds of each operation (``process_time``: every thread of the
process) and their ratio, which a shared machine's load moves much less than the wall time.

``make bench`` runs 200k rows; the figure on the performance page is 2M rows:
``python -m benchmarks python_peers --events 2000000`` (writes the JSON results), or alone
with every round printed: ``python -m benchmarks.bench_python_peers [--rows N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks._registry import BenchContext, Result, benchmark
from benchmarks._rounds import rotated_rounds
from benchmarks.bench_spark import SCHEMA

PARTITION = "region"
OPERATIONS = ("insert", "upsert", "read", "small_insert", "small_insert_big", "small_insert_series")
SMALL_ROWS = 500
SMALL_WRITES = 5
SERIES_WRITES = 200
UNSYNCED = "small_insert_unsynced"
ONE_BUCKET = "small_insert_one_bucket"
REGIONS = ("eu", "us", "apac", "latam")


def input_rows(rows: int) -> pa.Table:
    """``bench_spark.COLUMNS`` computed with numpy/pyarrow: the same values Spark makes."""
    ids = np.arange(rows, dtype=np.int64)
    regions = pa.DictionaryArray.from_arrays(pa.array(ids % 4, pa.int32()), pa.array(REGIONS)).cast(
        pa.string()
    )
    customer = pc.binary_join_element_wise(
        "customer-", pc.cast(pa.array(ids * 31 % 100_000), pa.string()), ""
    )
    sku = pc.binary_join_element_wise("sku-", pc.cast(pa.array(ids % 5000), pa.string()), "")
    columns = {
        "id": pa.array(ids),
        "region": regions,
        "ts": pa.array(ids * 3),
        "qty": pa.array((ids % 1000).astype(np.int32)),
        "price": pa.array(ids / 7.0),
        "discount": pa.array((ids % 100) / 100.0),
        "tax": pa.array(ids * 0.19),
        "customer": customer,
        "sku": sku,
        "paid": pa.array(ids % 2 == 0),
    }
    return pa.table(columns, schema=SCHEMA)


def changed_rows(data: pa.Table) -> pa.Table:
    """The upsert's rows: the keys with ``id % 10 == 3`` (10%), ``ts`` one newer."""
    changed = data.filter(pa.array(data["id"].to_numpy() % 10 == 3))
    return changed.set_column(changed.schema.get_field_index("ts"), "ts", pc.add(changed["ts"], 1))


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _timed(func: Callable[[], Any], figures: dict[str, float], operation: str) -> None:
    """Seconds of ``func`` under ``operation``, and the process's CPU seconds (every thread)
    under ``<operation>_cpu``: on a shared machine the wall figure moves with the load, the
    CPU figure much less."""
    cpu, start = time.process_time(), time.perf_counter()
    func()
    figures[operation] = time.perf_counter() - start
    figures[f"{operation}_cpu"] = time.process_time() - cpu


def _small_inserts(
    write: Callable[[pa.Table], Any],
    data: pa.Table,
    figures: dict[str, float],
    operation: str = "small_insert",
    *,
    first: bool = True,
) -> None:
    """The median of ``SMALL_WRITES`` appends of ``SMALL_ROWS`` rows under ``operation``,
    after one untimed (``first``: the write that creates a Delta table)."""
    if first:
        write(data.slice(0, SMALL_ROWS))
    timed: list[dict[str, float]] = []
    for i in range(1, SMALL_WRITES + 1):
        one: dict[str, float] = {}
        _timed(lambda i=i: write(data.slice(i * SMALL_ROWS, SMALL_ROWS)), one, operation)
        timed.append(one)
    for key in (operation, f"{operation}_cpu"):
        figures[key] = statistics.median(t[key] for t in timed)


def _series(write: Callable[[pa.Table], Any], data: pa.Table, figures: dict[str, float]) -> None:
    """The mean of ``SERIES_WRITES`` appends of ``SMALL_ROWS`` rows (wall and CPU), and the
    mean of the last quarter (``small_insert_series_last``); the rows wrap around ``data``."""
    starts = range(0, data.num_rows - SMALL_ROWS, SMALL_ROWS)
    walls: list[float] = []
    cpu = time.process_time()
    for i in range(SERIES_WRITES):
        start = time.perf_counter()
        write(data.slice(starts[i % len(starts)], SMALL_ROWS))
        walls.append(time.perf_counter() - start)
    figures["small_insert_series_cpu"] = (time.process_time() - cpu) / SERIES_WRITES
    figures["small_insert_series"] = statistics.mean(walls)
    figures["small_insert_series_last"] = statistics.mean(walls[-SERIES_WRITES // 4 :])


def measure(rows: int, rounds: int) -> dict[str, Any]:
    """Seconds per operation, variant and round, and bytes after the upsert."""
    from deltalake import DeltaTable, write_deltalake

    import lakewarden
    from lakewarden.api.table import Table

    data = input_rows(rows)
    changed = changed_rows(data)
    root = Path(tempfile.mkdtemp(prefix="lakewarden-bench-python-peers-"))

    def create(uri: str, buckets: int = 4) -> Table:
        return Table.create(
            uri,
            name=Path(uri).name,
            record_key="id",
            schema=SCHEMA,
            partition_by=[PARTITION],
            ordering_field="ts",
            buckets=buckets,
        )

    def ours(path: Path, data: pa.Table, changed: pa.Table) -> dict[str, float]:
        uri = str(path)
        table = create(uri)
        figures: dict[str, float] = {}
        small = create(f"{uri}-small")
        _small_inserts(lambda rows: small.write(rows, "insert"), data, figures)
        shutil.rmtree(f"{uri}-small", ignore_errors=True)
        unsynced = create(f"{uri}-unsynced")
        # Every fsync lakewarden makes goes through os.fsync; delta-rs calls none (strace of
        # write_deltalake to a local path shows none): the gap durability accounts for.
        with mock.patch.object(os, "fsync"):
            _small_inserts(lambda rows: unsynced.write(rows, "insert"), data, figures, UNSYNCED)
        shutil.rmtree(f"{uri}-unsynced", ignore_errors=True)
        one_bucket = create(f"{uri}-one-bucket", buckets=1)
        _small_inserts(lambda rows: one_bucket.write(rows, "insert"), data, figures, ONE_BUCKET)
        shutil.rmtree(f"{uri}-one-bucket", ignore_errors=True)
        series = create(f"{uri}-series")
        _series(lambda rows: series.write(rows, "insert"), data, figures)
        shutil.rmtree(f"{uri}-series", ignore_errors=True)
        _timed(lambda: table.write(data, "insert"), figures, "insert")
        _timed(lambda: table.write(changed, "upsert"), figures, "upsert")
        read: list[pa.Table] = []
        _timed(lambda: read.append(lakewarden.read(uri)), figures, "read")
        assert read[0].num_rows == data.num_rows, (read[0].num_rows, data.num_rows)
        size = _size(path)
        _small_inserts(
            lambda rows: table.write(rows, "insert"), data, figures, "small_insert_big", first=False
        )
        return {**figures, "bytes": size}

    def delta(path: Path, data: pa.Table, changed: pa.Table) -> dict[str, float]:
        uri = str(path)

        def upsert() -> None:
            merge = DeltaTable(uri).merge(
                changed, "t.id = s.id", source_alias="s", target_alias="t"
            )
            merge.when_matched_update_all().when_not_matched_insert_all().execute()

        figures: dict[str, float] = {}
        _small_inserts(
            lambda rows: write_deltalake(
                f"{uri}-small", rows, mode="append", partition_by=[PARTITION]
            ),
            data,
            figures,
        )
        shutil.rmtree(f"{uri}-small", ignore_errors=True)
        write_deltalake(f"{uri}-series", data.slice(0, 0), mode="append", partition_by=[PARTITION])
        series = DeltaTable(f"{uri}-series")  # kept, as lakewarden's Table is
        _series(
            lambda rows: write_deltalake(series, rows, mode="append", partition_by=[PARTITION]),
            data,
            figures,
        )
        shutil.rmtree(f"{uri}-series", ignore_errors=True)
        _timed(
            lambda: write_deltalake(uri, data, mode="append", partition_by=[PARTITION]),
            figures,
            "insert",
        )
        _timed(upsert, figures, "upsert")
        read: list[pa.Table] = []
        _timed(lambda: read.append(DeltaTable(uri).to_pyarrow_table()), figures, "read")
        assert read[0].num_rows == data.num_rows, (read[0].num_rows, data.num_rows)
        size = _size(path)
        _small_inserts(
            lambda rows: write_deltalake(uri, rows, mode="append", partition_by=[PARTITION]),
            data,
            figures,
            "small_insert_big",
            first=False,
        )
        return {**figures, "bytes": size}

    variants = {"lakewarden": ours, "delta": delta}
    small = data.slice(0, 10_000)
    try:
        for name, run in variants.items():  # untimed warm-up: imports, thread pools
            run(root / f"warmup-{name}", small, changed_rows(small))

        def round_of(name: str) -> Callable[[int], dict[str, float]]:
            def run(i: int) -> dict[str, float]:
                path = root / f"{name}-{i}"
                figures = variants[name](path, data, changed)
                shutil.rmtree(path, ignore_errors=True)
                figures = {**figures, "load1": os.getloadavg()[0]}
                line = {"variant": name, "round": i, **figures}
                print("python-peers-round " + json.dumps(line), flush=True)
                return figures

            return run

        runs = rotated_rounds(rounds, {name: round_of(name) for name in variants})
        return {"rows": rows, "upsert_rows": changed.num_rows, "runs": runs}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def results(measured: dict[str, Any]) -> list[Result]:
    runs: dict[str, list[dict[str, float]]] = measured["runs"]
    med = {
        variant: {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
        for variant, rounds in runs.items()
    }
    shape = f"{measured['rows']:,} rows x 10 columns by {PARTITION}"
    details = {
        "upsert_rows": measured["upsert_rows"],
        "bytes_after_upsert": {v: med[v]["bytes"] for v in med},
        # Median CPU seconds (all threads) per operation and variant, and their ratio.
        "cpu_s": {op: {v: med[v][f"{op}_cpu"] for v in med} for op in OPERATIONS},
        "cpu_ratio": {
            op: med["lakewarden"][f"{op}_cpu"] / med["delta"][f"{op}_cpu"] for op in OPERATIONS
        },
        "load_1m": [r["load1"] for rounds in runs.values() for r in rounds],
        "rounds": runs,
    }
    small = f"{SMALL_ROWS} rows appended, median of {SMALL_WRITES} writes in a row"
    labels = {
        "small_insert": small,
        "small_insert_big": f"{small}, into the table of {measured['rows']:,} rows",
        "small_insert_series": (
            f"{SMALL_ROWS} rows appended {SERIES_WRITES} times in a row through one kept "
            "handle, mean write"
        ),
    }
    extra_details = {
        "insert": details,
        "small_insert_series": {
            "last_quarter_mean_s": {v: med[v]["small_insert_series_last"] for v in med},
            "cpu_s": {v: med[v]["small_insert_series_cpu"] for v in med},
        },
    }
    found = [
        Result(
            benchmark="python_peers",
            metric=f"{operation}: lakewarden vs delta-rs, " + labels.get(operation, shape),
            unit="s",
            value=med["lakewarden"][operation],
            baseline=med["delta"][operation],
            baseline_label="delta-rs (deltalake) on the same rows",
            goal=1.0,
            details=extra_details.get(operation, {}),
        )
        for operation in OPERATIONS
    ]
    found.append(
        Result(
            benchmark="python_peers",
            metric=f"small_insert with fsync off (diagnostic, not a setting) vs delta-rs, {small}",
            unit="s",
            value=med["lakewarden"][UNSYNCED],
            baseline=med["delta"]["small_insert"],
            baseline_label="delta-rs (deltalake), which calls no fsync",
        )
    )
    found.append(
        Result(
            benchmark="python_peers",
            metric=(
                "small_insert into a table of one bucket per partition (diagnostic, a table "
                f"setting) vs delta-rs, {small}"
            ),
            unit="s",
            value=med["lakewarden"][ONE_BUCKET],
            baseline=med["delta"]["small_insert"],
            baseline_label="delta-rs (deltalake), one file per partition as this table",
        )
    )
    found.append(
        Result(
            benchmark="python_peers",
            metric=f"bytes on disk after the upsert, {shape}",
            unit="B",
            value=med["lakewarden"]["bytes"],
            baseline=med["delta"]["bytes"],
            baseline_label="delta-rs (deltalake) on the same rows",
            goal=1.0,
        )
    )
    return found


@benchmark("python_peers", "insert/upsert/read from plain Python: lakewarden vs delta-rs")
def bench_python_peers(ctx: BenchContext) -> Iterable[Result]:
    rows = ctx.events or ctx.scale(200_000, 20_000)  # --events N: N rows (2M for the figure)
    rounds = ctx.scale(3, 1)
    return results(measure(rows, rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows (default 2M)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    args = parser.parse_args()
    for result in results(measure(args.rows, args.rounds)):
        print(json.dumps({k: v for k, v in result.as_json().items() if k != "details"}))


if __name__ == "__main__":
    main()
