"""The cleaner: scaling over instances, and one clean's delete throughput.

**Scaling.** 200 tables, each with 3 versions of one file group (2 superseded files to
clean under keep-latest-commits=1), on a store with 5 ms per call (``FaultyStorage``
latency over local files in ``/dev/shm``). 1, 2 and 4 cleaner *instances* clean them all;
an instance is an OS process of its own (forked, with its own interpreter state and GIL)
running the service's ``CleanWorker`` and ``CleanQueue`` over the tables of the
``clean.requests`` partitions it owns (12 partitions dealt out round-robin, as the consumer
group's assignor does; a table's partition is crc32(table id) mod 12, as the producers key
it). The clock starts when every instance is up and stops when the last one is done. Value:
tables cleaned per second with 4 instances (and 2); baseline: with 1, same run. Goal: at least
3.5x. What it leaves out is the faust shell around the worker (the Kafka hop of the triggers,
the group's rebalance) and timeline-lock: its instances take the table lock in-process (their
tables are disjoint, as the partitions make them); the cleaning guide
(docs/guides/cleaning.md) says why that measures the cleaner's scaling all the same. Every
configuration gets fresh tables (built without latency).

**Delete throughput.** One clean of one table with 400 files to delete (orphans, deleted on
request) against a bare loop of ``storage.delete`` over 400 files, both at 5 ms per call.
Value: the clean's wall time (planning, its appends and the deletes); baseline: the loop's.
Goal: at most 1.2x. The clean deletes on 16 threads, so it beats the loop.

Run alone with ``python -m benchmarks.bench_cleaner [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import tempfile
import time
import zlib
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa

from benchmarks._registry import BenchContext, Result, benchmark
from lakewarden.events.topics import CLEAN_REQUESTS
from lakewarden.settings import Settings
from lakewarden.storage import open_storage
from lakewarden.storage.faults import FaultyStorage
from lakewarden.table import CleanPolicy, EmbeddedCoordinator, Table
from lakewarden_services.cleaner.protocol import Trigger
from lakewarden_services.cleaner.queue import CleanQueue
from lakewarden_services.cleaner.worker import CleanWorker

LATENCY_S = 0.005
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
# No retention window: the benchmark cleans right after writing, and measures the deletes.
KEEP_ONE = CleanPolicy(commits_retained=1, retention_window_s=0)


def _scratch() -> Path:
    shm = Path("/dev/shm")
    return Path(tempfile.mkdtemp(prefix="lw-bench-clean-", dir=shm if shm.is_dir() else None))


def _tables(root: Path, count: int, coordinator: EmbeddedCoordinator) -> list[Table]:
    tables = []
    for i in range(count):
        table = Table.create(
            str(root / f"t{i}"),
            name=f"t{i}",
            record_key="id",
            schema=SCHEMA,
            clean_policy=KEEP_ONE,
            coordinator=coordinator,
        )
        for version in range(3):
            table.write(pa.Table.from_pylist([{"id": 1, "v": str(version)}], schema=SCHEMA))
        tables.append(table)
    return tables


class _SlowWorker(CleanWorker):
    """The service's worker on a store with ``LATENCY_S`` per call."""

    def _storage(self, uri: str) -> FaultyStorage:
        return FaultyStorage(open_storage(uri), latency_s=LATENCY_S)


def _instance(
    index: int,
    owned: list[tuple[str, str]],
    go: multiprocessing.synchronize.Event,
    done: multiprocessing.queues.Queue[int],
) -> None:
    """One cleaner instance (a process): clean every owned (table id, URI); put the count of
    files deleted on ``done`` (-1 when a clean failed)."""
    coordinator = EmbeddedCoordinator()
    worker = _SlowWorker(Settings(), lambda: coordinator, instance=str(index))
    queue = CleanQueue()
    for table_id, uri in owned:
        queue.add(Trigger(table_id, "sweep"), uri, 0.0)
    go.wait()
    deleted = 0
    try:
        while (work := queue.take()) is not None:
            deleted += worker.clean(work).files_deleted
            queue.done(work.table_id)
    except Exception:
        deleted = -1
        raise
    finally:
        done.put(deleted)


def _clean_all(tables: list[Table], instances: int) -> float:
    """Seconds for ``instances`` processes to clean every table they own; checks all cleaned."""
    partitions = CLEAN_REQUESTS.partitions
    owned: list[list[tuple[str, str]]] = [[] for _ in range(instances)]
    for table in tables:
        partition = zlib.crc32(table.table_id.encode()) % partitions
        owned[partition % instances].append((table.table_id, table.uri))
    context = multiprocessing.get_context("fork")  # no re-import: up in milliseconds
    go = context.Event()
    done: multiprocessing.queues.Queue[int] = context.Queue()
    processes = [
        context.Process(target=_instance, args=(i, owned[i], go, done)) for i in range(instances)
    ]
    for process in processes:
        process.start()
    started = time.perf_counter()
    go.set()
    deleted = [done.get(timeout=600) for _ in processes]
    elapsed = time.perf_counter() - started
    for process in processes:
        process.join(30)
    if -1 in deleted or sum(deleted) != 2 * len(tables):
        raise AssertionError(f"files deleted per instance {deleted}, expected {2 * len(tables)}")
    return elapsed


def measure_scaling(count: int) -> dict[int, float]:
    """Tables per second by number of instances."""
    rates: dict[int, float] = {}
    for instances in (1, 2, 4):
        root = _scratch()
        try:
            coordinator = EmbeddedCoordinator()
            tables = _tables(root, count, coordinator)
            rates[instances] = count / _clean_all(tables, instances)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return rates


def measure_deletes(files: int) -> tuple[float, float]:
    """(seconds of one clean deleting ``files`` orphans, seconds of a bare delete loop)."""
    root = _scratch()
    try:
        coordinator = EmbeddedCoordinator()
        (table,) = _tables(root, 1, coordinator)
        storage = table.storage
        for i in range(files):
            storage.write(f"junk/a{i:05d}.bin", b"x" * 128)
        slow = Table(
            FaultyStorage(storage, latency_s=LATENCY_S), table.config, coordinator=coordinator
        )
        started = time.perf_counter()
        result = slow.clean(KEEP_ONE, delete_orphans=True, wall_clock=lambda: time.time() + 1e6)
        clean_s = time.perf_counter() - started
        if result.files_deleted < files:
            raise AssertionError(f"the clean deleted {result.files_deleted} files")
        keys = [f"loose/b{i:05d}.bin" for i in range(files)]
        for key in keys:
            storage.write(key, b"x" * 128)
        bare = FaultyStorage(storage, latency_s=LATENCY_S)
        started = time.perf_counter()
        for key in keys:
            bare.delete(key)
        return clean_s, time.perf_counter() - started
    finally:
        shutil.rmtree(root, ignore_errors=True)


@benchmark("cleaner", "cleaner instances over 200 tables at 5 ms per call; one clean's deletes")
def bench_cleaner(ctx: BenchContext) -> Iterable[Result]:
    count = ctx.scale(200, 40)
    rates = measure_scaling(count)
    for instances in (2, 4):
        yield Result(
            benchmark="cleaner",
            metric=f"tables cleaned/s, {instances} instances ({count} tables, 5 ms per call)",
            unit="tables/s",
            value=rates[instances],
            baseline=rates[1],
            baseline_label="1 instance",
            lower_is_better=False,
            goal=3.5 if instances == 4 else None,
            details={"rates": {str(k): round(v, 2) for k, v in rates.items()}},
        )
    files = ctx.scale(400, 100)
    clean_s, bare_s = measure_deletes(files)
    yield Result(
        benchmark="cleaner",
        metric=f"one clean deleting {files} files (5 ms per call)",
        unit="s",
        value=clean_s,
        baseline=bare_s,
        baseline_label="bare loop of storage.delete",
        goal=1.2,
        details={
            "files_per_s": round(files / clean_s, 1),
            "bare_files_per_s": round(files / bare_s, 1),
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts (a smoke run)")
    args = parser.parse_args()
    ctx = BenchContext(quick=args.quick)
    try:
        for result in bench_cleaner(ctx):
            print(json.dumps(result.as_json(), indent=2))
    finally:
        ctx.close()


if __name__ == "__main__":
    main()
