"""S3 job commit from manifests that came in TaskManifest events, against the same commit
reading every manifest from storage.

Each task attempt of a job uploads one small file (upload mode) and saves its manifest; the
job is built untimed on a SeaweedFS started for the run. Two variants commit jobs built
alike, in the same rounds (the order rotated each round, medians reported):

- **storage** (before): ``ManifestCommitter.commit_job``, which GETs every accepted
  attempt's manifest;
- **events** (after): the same with ``announced=`` the manifests job-committer holds from
  the events (each announcement encoded and decoded with the Avro codec, untimed: the service
  does it as the events arrive, before the request); the load stage lists the saved manifests
  once and reads none.

Both complete every upload and save ``_SUCCESS``: the figure is the whole job commit,
cleanup of the work area included. The details give the time up to ``_SUCCESS`` (the commit
point) and of the cleanup, the load stage alone, the manifests each variant read (a
``CallRecorder`` around the storage), and what rebuilding an announced manifest from its
event costs.
A second figure adds 20 ms to every storage call (``FaultyStorage``), as a remote S3 region
does: there the GETs the events save weigh more.

``make bench`` runs it at 100 task attempts; ``python -m benchmarks.bench_job_commit --tasks
1000`` runs it at 1,000 and writes the results where ``make perf-page`` finds them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from benchmarks._registry import BenchContext, Result, benchmark
from benchmarks._report import RESULTS_DIR, print_table, write_json
from benchmarks._rounds import rotation
from benchmarks.bench_commit import _Seaweed
from lakewarden.commit import AnnouncedManifest, ManifestCommitter, TaskAttemptId, new_job_id
from lakewarden.commit.stages.load import FROM_EVENTS
from lakewarden.events import decode, encode
from lakewarden.events.manifests import announced_manifest, task_manifest_event
from lakewarden.storage import Storage
from lakewarden.storage.faults import FaultyStorage
from lakewarden.testing import CallRecorder

LATENCY_S = 0.020
VARIANTS = ("storage", "events")


def build_job(
    storage: Storage, tasks: int
) -> tuple[str, list[TaskAttemptId], dict[str, AnnouncedManifest], float]:
    """A job whose ``tasks`` attempts each uploaded one file and committed; returns the job id,
    the accepted attempts, their manifests as job-committer holds them from the events, and
    the seconds rebuilding those took."""
    committer = ManifestCommitter(storage, new_job_id())
    committer.setup_job()

    def task(t: int) -> dict[str, Any]:
        attempt = committer.task_attempt(t, 0)
        attempt.setup()
        attempt.write_file(f"region=r{t % 10}/part-{t:05d}.parquet", b"x" * 100)
        result = attempt.commit(extra_data={"instant": "20260101000000000"})
        record = task_manifest_event(
            table_id="bench",
            producer_id="bench",
            table_uri=storage.uri,
            instant="20260101000000000",
            job_id=committer.job_id,
            task_id=str(result.attempt.task_id),
            attempt_id=str(result.attempt),
            manifest_key=result.manifest_key,
            file_count=result.files,
            total_bytes=result.bytes,
            saved=result.saved,
        )
        return decode(encode("TaskManifest", record)).record  # as the service receives it

    with ThreadPoolExecutor(16) as pool:
        records = list(pool.map(task, range(tasks)))
    start = time.perf_counter()
    held = {str(r["task_attempt_id"]): announced_manifest(r) for r in records}
    rebuild_s = time.perf_counter() - start
    accepted = [committer.layout.check_attempt(a) for a in held]
    return committer.job_id, accepted, {a: m for a, m in held.items() if m is not None}, rebuild_s


def commit_once(
    storage: Storage, tasks: int, variant: str, through: Callable[[Storage], Storage]
) -> dict[str, float]:
    """Build a job (untimed), commit it as ``variant``; its time, load stage and reads."""
    job_id, accepted, held, rebuild_s = build_job(storage, tasks)
    recorder = CallRecorder(storage)
    announced = held if variant == "events" else None
    committer = ManifestCommitter(through(recorder), job_id, announced=announced)
    start = time.perf_counter()
    result = committer.commit_job(accepted)
    seconds = time.perf_counter() - start
    assert len(result.files) == tasks
    assert committer.statistics.counter(FROM_EVENTS) == (tasks if announced else 0)
    cleanup_s = committer.statistics.total_ms("job_stage_cleanup") / 1000
    return {
        "seconds": seconds,
        "to_success_s": seconds - cleanup_s,  # the commit point; cleanup comes after it
        "cleanup_s": cleanup_s,
        "load_s": committer.statistics.total_ms("job_stage_load_manifests") / 1000,
        "manifest_reads": len(recorder.keys("read", containing="/manifests/")),
        "rebuild_ms_per_manifest": rebuild_s / tasks * 1000,
    }


def measure(tasks: int, rounds: int, latency_s: float) -> dict[str, Any]:
    """Medians of both variants over ``rounds`` rotated rounds on a fresh SeaweedFS."""
    seaweed = _Seaweed()

    def through(inner: Storage) -> Storage:
        return FaultyStorage(inner, latency_s=latency_s) if latency_s else inner

    runs: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    try:
        for round_ in range(rounds):
            for variant in rotation(round_, list(VARIANTS)):
                storage = seaweed.storage(f"r{round_}-{variant}")
                runs[variant].append(commit_once(storage, tasks, variant, through))
                print(
                    f"job_commit: {tasks} tasks, +{latency_s * 1000:g} ms, round {round_}, "
                    f"{variant}: {runs[variant][-1]['seconds']:.3f} s, load {os.getloadavg()}",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        seaweed.close()
    out: dict[str, Any] = {"tasks": tasks, "rounds": rounds, "latency_ms": latency_s * 1000}
    for variant, samples in runs.items():
        for name in samples[0]:
            out[f"{variant}_{name}"] = statistics.median(s[name] for s in samples)
        out[f"{variant}_seconds_all"] = [round(s["seconds"], 3) for s in samples]
    out["load_average_1m"] = os.getloadavg()[0]
    return out


def results(tasks: int, rounds: int, latency_rounds: int | None = None) -> Iterable[Result]:
    """Both figures; the +20 ms one over ``latency_rounds`` (default ``rounds``)."""
    settings = ((0.0, "SeaweedFS", rounds), (LATENCY_S, "SeaweedFS + 20 ms per call", None))
    for latency_s, where, count in settings:
        count = count or latency_rounds or rounds
        figures = measure(tasks, count, latency_s)
        yield Result(
            "job_commit",
            f"S3 job commit of {tasks} task attempts, manifests from events ({where})",
            "s",
            figures["events_seconds"],
            figures["storage_seconds"],
            "the same commit reading every manifest from storage",
            goal=1.0,
            details=figures,
        )


@benchmark("job_commit", "S3 job commit: manifests from TaskManifest events vs read from storage")
def bench_job_commit(ctx: BenchContext) -> Iterable[Result]:
    return results(ctx.scale(100, 10), ctx.scale(3, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100, help="task attempts per job")
    parser.add_argument("--rounds", type=int, default=3, help="rotated rounds (medians)")
    parser.add_argument(
        "--latency-rounds", type=int, default=None, help="rounds of the +20 ms figure"
    )
    args = parser.parse_args()
    started = datetime.now(UTC)
    measured = list(results(args.tasks, args.rounds, args.latency_rounds))
    from rich.console import Console

    print_table(Console(), measured, {})
    path = write_json(
        measured, {}, started=started, quick=False, context_environment={}, directory=RESULTS_DIR
    )
    print(f"results written to {path}")


if __name__ == "__main__":
    main()
