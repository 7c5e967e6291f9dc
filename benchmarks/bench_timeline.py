"""Timeline load with and without checkpoints, and the append+validate rate, on local FS.

**Load.** A timeline of N entries (1k, 10k, 100k; a third each requested, inflight, completed
of upserts touching two of 256 file groups) is generated once per run into a temporary
directory: the entry files are written directly (no fsync, it is only test data) and the
checkpoint is the real ``CheckpointStore.write`` of the replayed state at the last multiple
of K=100 at least 50 entries below the tail, so a load reads one checkpoint plus 50-149
entries, as in steady state. Measured on a fresh ``Timeline`` (no cache) each time:

- value: ``Timeline.load()`` (newest checkpoint + entries after it);
- baseline: ``Timeline.load(full_replay=True)`` (every entry through the state machine);
- reference (details): listing and reading the same N entry files, nothing parsed.

Each size gets a second row against the reference (the file I/O floor). The load goal
is absolute, 100k entries in under 1 s with checkpoints: it is that row's ``budget``, checked
beside the ratio, not a baseline. The three loads run in rounds, their order rotated.

**Append.** ``WriteTransaction`` lifecycles (requested, inflight, completed; every completion
conflict-checked) through ``LocalStorage`` (fsynced ``write_if_absent``), on an empty timeline
and on one that already holds 10k entries. Baseline: bare ``LocalStorage.write_if_absent`` of
entry-sized objects into the same directory, i.e. the storage primitive without the log. Both
run in four rounds of a quarter each, their order rotated.

Run alone with ``python -m benchmarks.bench_timeline [--quick]``; ``make bench`` runs it
through the registry.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from benchmarks._registry import BenchContext, Result, benchmark
from benchmarks._rounds import timed_rounds
from lakewarden.storage.local import LocalStorage
from lakewarden.table.checkpoint import TIMELINE_PREFIX, CheckpointStore, entry_key
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.instant import Action, Instant, Transition
from lakewarden.table.state_machine import Replayer
from lakewarden.table.stats import CommitStats, FileGroupId, WorkloadProfile, WriteStat
from lakewarden.table.timeline import EntryDraft, Timeline, TimelineEntry, TimelineState
from lakewarden.table.transaction import WriteTransaction

K = 100
LOAD_BUDGET_S = 1.0  # 100k entries load in under 1 s (a bound, not a baseline)
APPEND_ROUNDS = 4
BUCKETS = 64
PARTITIONS = ("region=eu", "region=us", "region=apac", "region=latam")
START_MS = 1_700_000_000_000


def _groups(i: int) -> tuple[FileGroupId, ...]:
    return tuple(
        FileGroupId(partition_path=PARTITIONS[(i + j) % 4], file_id=f"{(i * 7 + j) % BUCKETS:08d}")
        for j in range(2)
    )


def _stats(i: int, instant: str) -> CommitStats:
    return CommitStats(
        operation="upsert",
        write_stats=tuple(
            WriteStat(
                file_group=g,
                path=f"{g.partition_path}/{g.file_id}-0_0-1-{i}_{instant}.parquet",
                base_instant=instant,
                num_records=1000,
                num_updates=400,
                num_inserts=600,
                size_bytes=123_456,
            )
            for g in _groups(i)
        ),
    )


def _lifecycle(i: int, seq: int) -> list[TimelineEntry]:
    """Entries ``seq``, ``seq+1``, ``seq+2``: instant ``i`` requested, inflight, completed."""
    instant = str(Instant.from_epoch_ms(START_MS + i))
    groups = _groups(i)
    stats = _stats(i, instant)
    payloads: list[tuple[Transition, dict[str, Any]]] = [
        (Transition.REQUESTED, {"operation": "upsert", "cancellable": False, "plan": None}),
        (
            Transition.INFLIGHT,
            WorkloadProfile(operation="upsert", file_groups=groups).model_dump(mode="json"),
        ),
        (Transition.COMPLETED, stats.model_dump(mode="json")),
    ]
    return [
        EntryDraft(
            instant=instant,
            action=Action.COMMIT,
            transition=transition,
            actor="bench",
            lock_token=i + 1,
            wall_time_ms=START_MS + i,
            payload=payload,
        ).at(seq + n)
        for n, (transition, payload) in enumerate(payloads)
    ]


def generate(root: Path, n: int) -> int:
    """Write an ``n``-entry timeline under ``root`` and its newest checkpoint; returns the
    checkpoint's seq."""
    directory = root / TIMELINE_PREFIX
    directory.mkdir(parents=True)
    checkpoint_seq = ((n - 50) // K) * K - 1
    replayer = Replayer(TimelineState())
    checkpoint: TimelineState | None = None
    seq = 0
    for i in range(n // 3 + 1):
        for entry in _lifecycle(i, seq):
            if entry.seq >= n:
                break
            (root / entry_key(entry.seq)).write_bytes(entry.model_dump_json().encode())
            replayer.feed(entry)
            if entry.seq == checkpoint_seq:
                checkpoint = replayer.state()
        seq += 3
    assert checkpoint is not None and replayer.state().rejected == ()
    CheckpointStore(LocalStorage(root), interval=K).write(checkpoint)
    return checkpoint_seq


def _timed(func: Callable[[], Any]) -> float:
    # Start every run from a collected heap, so one run does not pay for the garbage of the
    # previous one (the collector is left on: its cost while loading is part of the result).
    gc.collect()
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def _raw_read(storage: LocalStorage) -> int:
    count = 0
    for info in storage.list(TIMELINE_PREFIX):
        if "/_checkpoints/" not in info.key:
            storage.read(info.key)
            count += 1
    return count


def measure_load(n: int, repeats: int) -> dict[str, Any]:
    """Generate an ``n``-entry timeline, then time the three ways to read it, interleaved."""
    root = Path(tempfile.mkdtemp(prefix="lakewarden-bench-timeline-"))
    try:
        generate_s = _timed(lambda: generate(root, n))
        storage = LocalStorage(root)
        assert Timeline(storage).load() == Timeline(storage).load(full_replay=True)
        times = timed_rounds(
            repeats,
            {
                "checkpoint": lambda _: Timeline(storage).load(),
                "full": lambda _: Timeline(storage).load(full_replay=True),
                "raw": lambda _: _raw_read(storage),
            },
            collect=True,  # no run pays for the garbage of the one before it
        )
        ckpt, full, raw = times["checkpoint"], times["full"], times["raw"]
        checkpoint_bytes = sum(
            info.size for info in storage.list(TIMELINE_PREFIX + "_checkpoints/")
        )
        return {
            "entries": n,
            "checkpoint_s": statistics.median(ckpt),
            "full_replay_s": statistics.median(full),
            "raw_read_s": statistics.median(raw),
            "checkpoint_bytes": checkpoint_bytes,
            "generate_s": generate_s,
            "repeats": repeats,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def measure_append(lifecycles: int, preload: int) -> dict[str, Any]:
    """Append ``lifecycles`` x 3 entries through ``WriteTransaction`` on a timeline that
    already holds ``preload`` entries; the baseline writes as many bare objects."""
    root = Path(tempfile.mkdtemp(prefix="lakewarden-bench-append-"))
    try:
        if preload:
            generate(root, preload)
        storage = LocalStorage(root)
        timeline, coordinator = Timeline(storage, checkpoint_interval=K), EmbeddedCoordinator()
        timeline.load()
        blob = _lifecycle(0, 0)[2].model_dump_json().encode()
        per_round = max(lifecycles // APPEND_ROUNDS, 1)

        def ours(round_: int) -> None:
            for i in range(round_ * per_round, (round_ + 1) * per_round):
                tx = WriteTransaction.begin(
                    timeline, coordinator, "bench", operation="upsert", actor="bench"
                )
                tx.inflight(WorkloadProfile(operation="upsert", file_groups=_groups(i)))
                tx.complete(_stats(i, tx.instant))

        def bare(round_: int) -> None:
            for i in range(round_ * per_round * 3, (round_ + 1) * per_round * 3):
                storage.write_if_absent(f"bare/{i:020d}.json", blob)

        times = timed_rounds(
            APPEND_ROUNDS,
            {"ours": ours, "bare": bare},  # each round appends a slice of the lifecycles
        )
        lifecycles = per_round * APPEND_ROUNDS
        ours_s, bare_s = sum(times["ours"]), sum(times["bare"])
        state = timeline.load()
        assert len(state.completed()) >= lifecycles and state.rejected == ()
        return {
            "entries": lifecycles * 3,
            "preload": preload,
            "appends_per_s": lifecycles * 3 / ours_s,
            "bare_writes_per_s": lifecycles * 3 / bare_s,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


@benchmark("timeline", "timeline load with/without checkpoints (1k-100k entries), append rate")
def bench_timeline(ctx: BenchContext) -> Iterable[Result]:
    sizes = (1_000, 10_000, 100_000) if not ctx.quick else (1_000, 10_000)
    for n in sizes:
        numbers = measure_load(n, repeats=ctx.scale(5 if n < 100_000 else 3, 2))
        yield Result(
            benchmark="timeline",
            metric=f"load {n:,} entries (checkpoint every {K})",
            unit="s",
            value=numbers["checkpoint_s"],
            baseline=numbers["full_replay_s"],
            baseline_label="full replay of every entry (no checkpoint)",
            details=numbers,
        )
        yield Result(
            benchmark="timeline",
            metric=f"load {n:,} entries with checkpoints vs reading the raw entry files",
            unit="s",
            value=numbers["checkpoint_s"],
            baseline=numbers["raw_read_s"],
            baseline_label="listing and reading every entry file, nothing parsed",
            # the goal is absolute: 100k entries loaded in under 1 s
            budget=LOAD_BUDGET_S if n == 100_000 else None,
            details=numbers,
        )
    for preload in (0, ctx.scale(10_000, 1_000)):
        numbers = measure_append(ctx.scale(100, 20), preload)
        yield Result(
            benchmark="timeline",
            metric=f"append+validate on local FS ({preload:,} entries before)",
            unit="entries/s",
            value=numbers["appends_per_s"],
            baseline=numbers["bare_writes_per_s"],
            baseline_label="bare LocalStorage.write_if_absent of entry-sized objects",
            lower_is_better=False,
            details=numbers,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1k and 10k entries, fewer repeats")
    args = parser.parse_args()
    for result in bench_timeline(BenchContext(quick=args.quick)):
        print(json.dumps(result.as_json(), indent=2))


if __name__ == "__main__":
    main()
