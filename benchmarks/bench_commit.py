"""Job commit of the manifest committer, side by side with Hadoop's v1 algorithm and the floor.

**(a) local FS**, 10,000 files from 100 manifests (100 files per task over 10 partition
directories). Each variant gets a fresh tree (built untimed) and the timed part is the job
commit only; medians of 4 rounds, the variants' order rotated each round and the disk synced
before each:

- ours: ``ManifestCommitter.commit_job`` by a fresh committer: load, validate (path rules,
  symlinks, duplicates, the size of every source), directories, renames, one fsync per
  directory, ``_SUCCESS`` (the commit point, fsynced), then cleanup of the work area;
- FileOutputCommitter v1: task commit renamed each attempt directory (untimed); job commit
  walks every task directory with Hadoop's ``mergePaths`` (``getFileStatus`` of the target,
  whole-directory rename when the target directory is missing, file by file otherwise),
  writes ``_SUCCESS`` and deletes ``_temporary``;
- floor: the same renames from a precomputed list, as the fastest of a plain ``os.rename``
  loop and 8 threads of renames (destination directories created first, nothing else).

Goals: faster than v1 (both including their cleanup); within 2x of the floor, for ours up to
``_SUCCESS`` (the floor does no cleanup: removing ~1,100 just-emptied directories and 100
fsynced manifests costs 0.15-0.5 s on this project's ext4 disks, whoever does it; it is
reported in the details).

**(b) per-call latency**: the same protocol through ``FaultyStorage`` adding 5 ms to every
metadata call (list, stat, exists, rename, delete), as HDFS/ABFS/GCS calls cost. Ours runs its
thread pool (32 threads); v1 is sequential and, the contract having no directory rename,
lists each task directory and checks and renames file by file. 2,000 files from 20 manifests
by default (v1 needs ~11 ms a file here: 10,000 files would take two minutes). Goal: 5x.

**(c) SeaweedFS**: 1,000 pending multipart uploads (10 tasks x 100 small files, uploaded by
``TaskAttempt`` writers) completed by the job commit's ``CompleteUploadsStage`` (32 threads,
chunks of 4), against the same number of uploads completed one by one. A SeaweedFS is started
for the run (``lakewarden.devstack``) and stopped after. Goal: 4x. The details also give a
plain thread pool of completions on the same endpoint (the box's ceiling): boto3 spends ~1.1 ms
of CPU per request under the GIL and SeaweedFS shares the same two cores, so on a loaded
machine no client gets 4x.

**(d) SeaweedFS + 20 ms per request**: (c) with ``FaultyStorage`` adding 20 ms to every
storage call, as a remote region does; the stage against one by one through the same wrapper.
Goal: 8x (the waits overlap; the client's CPU per call no longer dominates).

**Memory**: how far the resident set grows while loading 100 manifests of 10,000 entries each
(``LoadManifestsStage``: a few manifests at a time, entries spilled) against parsing and
keeping them all (a naive loader), each in a fresh subprocess whose peak RSS is reset first.

Run alone with ``python -m benchmarks.bench_commit [--quick]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import stat
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from benchmarks._registry import BenchContext, Result, benchmark
from benchmarks._rounds import rotation
from lakewarden.commit import CommitterOptions, ManifestCommitter, TaskAttemptId, new_job_id
from lakewarden.commit._spill import EntrySpill
from lakewarden.commit._store import CommitStore
from lakewarden.commit.layout import JobLayout
from lakewarden.commit.manifest import (
    FileEntry,
    ManifestHeader,
    directories_of,
    serialize_manifest,
)
from lakewarden.commit.stages import LoadArgs, LoadManifestsStage, StageConfig
from lakewarden.settings import S3Settings
from lakewarden.storage import Storage, UploadedPart
from lakewarden.storage.faults import FaultyStorage, Operation
from lakewarden.storage.local import LocalStorage
from lakewarden.storage.s3 import S3Storage

METADATA_OPS: tuple[Operation, ...] = ("list", "stat", "exists", "rename", "delete")
PARTITIONS = 10
FILE_BYTES = 100


def timed(func: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def _name(task: int, i: int) -> str:
    return f"p={i % PARTITIONS}/part-{task:05d}-{i:05d}.parquet"


def _write(path: str, data: bytes) -> None:
    """A data file written the way a benchmark may (no fsync: only test data)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as out:
        out.write(data)


def build_job(
    storage: Storage, tasks: int, per_task: int, *, parallel: int = 1
) -> tuple[str, list[TaskAttemptId]]:
    """A set-up job whose ``tasks`` attempts each wrote and committed ``per_task`` files."""
    committer = ManifestCommitter(storage, new_job_id())
    committer.setup_job()
    data = b"x" * FILE_BYTES

    def task(t: int) -> TaskAttemptId:
        attempt = committer.task_attempt(t, 0)
        attempt.setup()
        for i in range(per_task):
            if attempt.upload_mode:
                attempt.write_file(_name(t, i), data)
            else:
                _write(attempt.local_path(_name(t, i)), data)
        attempt.commit()
        return attempt.attempt_id

    with ThreadPoolExecutor(parallel) as pool:
        return committer.job_id, list(pool.map(task, range(tasks)))


def build_v1(root: Path, tasks: int, per_task: int) -> None:
    """v1's state after every task commit: ``_temporary/0/task_<t>/`` per committed task (the
    task commit renamed its attempt directory there)."""
    job_attempt = root / "_temporary" / "0"
    for t in range(tasks):
        attempt_dir = job_attempt / "_temporary" / f"attempt_{t:05d}_0"
        for i in range(per_task):
            _write(str(attempt_dir / _name(t, i)), b"x" * FILE_BYTES)
        os.rename(attempt_dir, job_attempt / f"task_{t:05d}")


def _merge_paths(src: str, dst: str, src_is_dir: bool) -> None:
    """Hadoop's ``FileOutputCommitter.mergePaths`` on a local filesystem."""
    try:
        dst_mode: int | None = os.lstat(dst).st_mode  # getFileStatus(to)
    except FileNotFoundError:
        dst_mode = None
    if not src_is_dir:
        if dst_mode is not None:
            os.unlink(dst)
        os.rename(src, dst)
    elif dst_mode is None:
        os.rename(src, dst)  # the whole directory at once
    elif not stat.S_ISDIR(dst_mode):
        os.unlink(dst)
        os.rename(src, dst)
    else:
        with os.scandir(src) as children:  # listStatus: a FileStatus per child
            for child in list(children):
                child.stat(follow_symlinks=False)
                _merge_paths(child.path, os.path.join(dst, child.name), child.is_dir())


def v1_job_commit(root: Path) -> None:
    """v1 job commit: merge every committed task directory, ``_SUCCESS``, delete _temporary."""
    job_attempt = root / "_temporary" / "0"
    with os.scandir(job_attempt) as entries:
        task_dirs = sorted(e.path for e in entries if e.name.startswith("task_"))
    for task_dir in task_dirs:
        _merge_paths(task_dir, str(root), True)
    (root / "_SUCCESS").write_bytes(b"")
    shutil.rmtree(root / "_temporary")


def v1_job_commit_store(storage: Storage) -> None:
    """v1 job commit through the ``Storage`` contract (no directory rename): list each task
    directory, then per file check the target, delete it if present, rename."""
    prefix = "_temporary/0/"
    tasks = sorted({info.key[len(prefix) :].split("/")[0] for info in storage.list(prefix)})
    for task in tasks:
        task_prefix = f"{prefix}{task}/"
        for info in storage.list(task_prefix):
            dst = info.key[len(task_prefix) :]
            if storage.exists(dst):
                storage.delete(dst)
            storage.rename(info.key, dst)
    storage.write("_SUCCESS", b"")
    for info in storage.list("_temporary/"):
        storage.delete(info.key)


def build_floor(root: Path, tasks: int, per_task: int) -> list[tuple[str, str]]:
    """The same files, and the (source, destination) pairs a floor renames."""
    pairs = []
    for t in range(tasks):
        for i in range(per_task):
            src = str(root / "src" / f"{t:05d}" / _name(t, i))
            _write(src, b"x" * FILE_BYTES)
            pairs.append((src, str(root / "dst" / _name(t, i))))
    return pairs


def _make_leaves(pairs: list[tuple[str, str]]) -> None:
    for directory in sorted({os.path.dirname(dst) for _, dst in pairs}):
        os.makedirs(directory, exist_ok=True)


def rename_loop(pairs: list[tuple[str, str]]) -> None:
    _make_leaves(pairs)
    for src, dst in pairs:
        os.rename(src, dst)


def rename_threads(pairs: list[tuple[str, str]], threads: int) -> None:
    _make_leaves(pairs)
    batches = [pairs[i : i + 500] for i in range(0, len(pairs), 500)]

    def run(batch: list[tuple[str, str]]) -> None:
        for src, dst in batch:
            os.rename(src, dst)

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(run, batches))


def data_keys(storage: Storage) -> set[str]:
    return {
        info.key
        for info in storage.list("")
        if not info.key.startswith(("_temporary/", ".lakewarden/")) and info.key != "_SUCCESS"
    }


def check_same_files(roots: dict[str, Path], files: int) -> None:
    """Every variant moved the same ``files`` files (a benchmark that lost some would win)."""
    counts = {
        "ours": len(data_keys(LocalStorage(roots["ours"]))),
        "v1": len(data_keys(LocalStorage(roots["v1"]))),
        "loop": len(data_keys(LocalStorage(roots["loop"] / "dst"))),
        "threads": len(data_keys(LocalStorage(roots["threads"] / "dst"))),
    }
    assert set(counts.values()) == {files}, counts


class _Seaweed:
    """A SeaweedFS started for this benchmark (stopped by ``close``)."""

    def __init__(self) -> None:
        from lakewarden.devstack import SeaweedS3
        from lakewarden.devstack.processes import free_port

        self.home = Path(tempfile.mkdtemp(prefix="lakewarden-bench-s3-"))
        self.server = SeaweedS3(home=self.home, port=free_port())
        self.server.start(bucket="bench")
        self.settings = S3Settings(
            endpoint_url=self.server.endpoint_url,
            region=self.server.region,
            access_key_id=SecretStr(self.server.access_key),
            secret_access_key=SecretStr(self.server.secret_key),
        )

    def storage(self, prefix: str) -> S3Storage:
        return S3Storage("bench", prefix, self.settings)

    def close(self) -> None:
        self.server.stop()
        shutil.rmtree(self.home, ignore_errors=True)


def complete_uploads(
    storage: S3Storage,
    count: int,
    threads: int,
    *,
    through: Callable[[Storage], Storage] = lambda storage: storage,
) -> tuple[float, float]:
    """Create ``count`` pending uploads (untimed, in parallel), then complete them all, one by
    one (``threads == 1``) or from a plain thread pool (the box's ceiling, for reference),
    through ``through(storage)`` (a latency-adding wrapper). Returns the seconds the
    completions took and the CPU seconds this process spent meanwhile."""

    def create(i: int) -> tuple[str, str, UploadedPart]:
        key = _name(0, i)
        upload_id = storage.create_multipart(key)
        return key, upload_id, storage.upload_part(key, upload_id, 1, b"x" * FILE_BYTES)

    completing = through(storage)

    def complete(upload: tuple[str, str, UploadedPart]) -> None:
        completing.complete_multipart(upload[0], upload[1], [upload[2]])

    with ThreadPoolExecutor(8) as pool:
        uploads = list(pool.map(create, range(count)))
    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    if threads == 1:
        for upload in uploads:
            complete(upload)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(complete, uploads))
    return time.perf_counter() - start, time.process_time() - cpu


def write_big_manifests(root: Path, manifests: int, entries: int) -> str:
    """``manifests`` manifests of ``entries`` entries each (sources need not exist: loading
    checks paths, not files); returns the job id."""
    storage = LocalStorage(root)
    layout = JobLayout(new_job_id())
    for t in range(manifests):
        attempt = layout.attempt_id(t)
        base = layout.task_attempt_dir(attempt)
        files = [FileEntry(base + _name(t, i), _name(t, i), FILE_BYTES + i) for i in range(entries)]
        header = ManifestHeader(
            job_id=layout.job_id,
            job_attempt_number=0,
            task_id=str(attempt.task_id),
            task_attempt_id=str(attempt),
            task_attempt_dir=base,
            directories=directories_of(files),
        )
        storage.write(layout.manifest_key(attempt), serialize_manifest(header, files))
    return layout.job_id


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def memory_child(root: Path, job_id: str, manifests: int, mode: str) -> dict[str, Any]:
    """In a fresh process: load the manifests (``ours``: the load stage; ``naive``: parse and
    keep every manifest) and report how far the resident set grew at its peak (the peak is
    reset first through ``/proc/self/clear_refs``, so imports do not count)."""
    storage = LocalStorage(root)
    layout = JobLayout(job_id)
    accepted = [layout.attempt_id(t) for t in range(manifests)]
    gc.collect()
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # reset VmHWM (peak RSS) to the current RSS
    before = _status_kib("VmRSS")
    start = time.perf_counter()
    if mode == "ours":
        with ThreadPoolExecutor(16) as pool, EntrySpill() as spill:
            config = StageConfig(CommitStore(storage), layout, CommitterOptions(), pool)
            loaded = LoadManifestsStage(config).run(LoadArgs(accepted, spill))
            files = loaded.files
    else:
        held = [json.loads(storage.read(layout.manifest_key(a))) for a in accepted]
        files = sum(len(doc["files"]) for doc in held)
    seconds = time.perf_counter() - start
    peak = _status_kib("VmHWM")
    return {"files": files, "seconds": seconds, "peak_mib": (peak - before) / 1024}


def measure_local(tasks: int, per_task: int, repeats: int) -> dict[str, Any]:
    """(a): medians of ours, v1, and the two floors over ``repeats`` fresh trees each."""
    times: dict[str, list[float]] = {
        "ours": [],
        "ours_cleanup": [],
        "ours_to_success": [],
        "v1": [],
        "loop": [],
        "threads": [],
    }
    work = Path(tempfile.mkdtemp(prefix="lakewarden-bench-commit-"))
    try:
        for r in range(repeats):
            round_times = _local_round(work / str(r), tasks, per_task, r)
            round_times["ours_to_success"] = round_times["ours"] - round_times["ours_cleanup"]
            for name, seconds in round_times.items():
                times[name].append(seconds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    medians = {name: statistics.median(values) for name, values in times.items()}
    medians["floor"] = min(medians["loop"], medians["threads"])
    return {"files": tasks * per_task, "manifests": tasks, "repeats": repeats, **medians}


def _local_round(work: Path, tasks: int, per_task: int, turn: int) -> dict[str, float]:
    """One fresh tree per variant (built untimed), then each variant's timed commit.

    The variants run in an order rotated by ``turn``, each after an ``os.sync()``: building
    40,000 files leaves the disk busy writing them back, which would otherwise slow whichever
    variant runs first.
    """
    roots = {name: work / name for name in ("ours", "v1", "loop", "threads")}
    job_id, accepted = build_job(LocalStorage(roots["ours"]), tasks, per_task)
    build_v1(roots["v1"], tasks, per_task)
    pairs_loop = build_floor(roots["loop"], tasks, per_task)
    pairs_threads = build_floor(roots["threads"], tasks, per_task)
    committer = ManifestCommitter(LocalStorage(roots["ours"]), job_id)
    variants: list[tuple[str, Callable[[], object]]] = [
        ("ours", lambda: committer.commit_job(accepted)),
        ("v1", lambda: v1_job_commit(roots["v1"])),
        ("loop", lambda: rename_loop(pairs_loop)),
        ("threads", lambda: rename_threads(pairs_threads, 8)),
    ]
    result: dict[str, float] = {}
    for name, run in rotation(turn, variants):
        os.sync()
        result[name] = timed(run)
    result["ours_cleanup"] = committer.statistics.total_ms("job_stage_cleanup") / 1000
    check_same_files(roots, tasks * per_task)
    shutil.rmtree(work, ignore_errors=True)
    return result


def measure_latency(tasks: int, per_task: int, latency_s: float) -> dict[str, Any]:
    """(b): ours (parallel) and v1 (sequential) through a store with per-call latency."""
    work = Path(tempfile.mkdtemp(prefix="lakewarden-bench-commit-latency-"))
    try:
        job_id, accepted = build_job(LocalStorage(work / "ours"), tasks, per_task)
        build_v1(work / "v1", tasks, per_task)
        slow_ours = FaultyStorage(
            LocalStorage(work / "ours"), latency_s=latency_s, latency_ops=METADATA_OPS
        )
        slow_v1 = FaultyStorage(
            LocalStorage(work / "v1"), latency_s=latency_s, latency_ops=METADATA_OPS
        )
        committer = ManifestCommitter(slow_ours, job_id)
        ours = timed(lambda: committer.commit_job(accepted))
        v1 = timed(lambda: v1_job_commit_store(slow_v1))
        assert data_keys(LocalStorage(work / "ours")) == data_keys(LocalStorage(work / "v1"))
        return {
            "files": tasks * per_task,
            "manifests": tasks,
            "latency_ms": latency_s * 1000,
            "ours_s": ours,
            "v1_s": v1,
            "ours_calls": slow_ours.call_counts,
            "v1_calls": slow_v1.call_counts,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure_s3(tasks: int, per_task: int) -> dict[str, Any]:
    """(c): completing pending uploads in parallel (the stage) vs one by one, on a SeaweedFS
    started for this measurement."""
    seaweed = _Seaweed()
    try:
        storage = seaweed.storage("commit")
        job_id, accepted = build_job(storage, tasks, per_task, parallel=8)
        committer = ManifestCommitter(storage, job_id)
        cpu = time.process_time()
        total = timed(lambda: committer.commit_job(accepted))
        commit_cpu_s = time.process_time() - cpu
        assert len(data_keys(storage)) == tasks * per_task
        parallel_s = committer.statistics.total_ms("job_stage_complete_uploads") / 1000
        count = tasks * per_task
        sequential_s, sequential_cpu_s = complete_uploads(seaweed.storage("sequential"), count, 1)
        threads = committer.options.threads
        ceiling_s, ceiling_cpu_s = complete_uploads(seaweed.storage("ceiling"), count, threads)
        # Where the time goes: a completion costs the client CPU (boto3: signing, the XML
        # request and response) and a round trip to SeaweedFS, which computes the ETag and
        # writes the object's metadata on the same two cores. Threads overlap only the part
        # that is not this process's CPU (held under the GIL).
        return {
            "uploads": count,
            "parallel_complete_s": parallel_s,
            "sequential_complete_s": sequential_s,
            "plain_thread_pool_complete_s": ceiling_s,
            "sequential_ms_per_upload": round(sequential_s / count * 1000, 3),
            "client_cpu_ms_per_upload_sequential": round(sequential_cpu_s / count * 1000, 3),
            "client_cpu_ms_per_upload_thread_pool": round(ceiling_cpu_s / count * 1000, 3),
            "client_cpu_bound_speedup": round(sequential_s / max(ceiling_cpu_s, 1e-9), 2),
            "whole_job_commit_cpu_s": round(commit_cpu_s, 3),
            "load_average_1m": os.getloadavg()[0],
            "cpus": os.cpu_count(),
            "whole_job_commit_s": total,
            "threads": threads,
        }
    finally:
        seaweed.close()


def measure_s3_latency(tasks: int, per_task: int, latency_s: float) -> dict[str, Any]:
    """(d): the same completions on SeaweedFS with ``latency_s`` added to every storage call
    (``FaultyStorage``; what a remote S3 region costs per request), the job commit's stage
    against one by one. Here waiting dominates, and waits overlap across threads."""
    seaweed = _Seaweed()
    try:
        storage = seaweed.storage("commit")
        job_id, accepted = build_job(storage, tasks, per_task, parallel=8)  # untimed, fast

        def slow(inner: Storage) -> Storage:
            return FaultyStorage(inner, latency_s=latency_s)

        committer = ManifestCommitter(slow(storage), job_id)
        total = timed(lambda: committer.commit_job(accepted))
        assert len(data_keys(storage)) == tasks * per_task
        parallel_s = committer.statistics.total_ms("job_stage_complete_uploads") / 1000
        count = tasks * per_task
        sequential_s, _ = complete_uploads(seaweed.storage("seq"), count, 1, through=slow)
        return {
            "uploads": count,
            "latency_ms": latency_s * 1000,
            "parallel_complete_s": parallel_s,
            "sequential_complete_s": sequential_s,
            "whole_job_commit_s": total,
            "threads": committer.options.threads,
            "load_average_1m": os.getloadavg()[0],
        }
    finally:
        seaweed.close()


def measure_memory(manifests: int, entries: int) -> dict[str, Any]:
    """Peak memory of loading ``manifests`` x ``entries``, ours vs all parsed at once."""
    work = Path(tempfile.mkdtemp(prefix="lakewarden-bench-commit-memory-"))
    try:
        job_id = write_big_manifests(work, manifests, entries)
        ours = _memory_child(work, job_id, manifests, "ours")
        naive = _memory_child(work, job_id, manifests, "naive")
        return {"manifests": manifests, "entries_each": entries, "ours": ours, "naive": naive}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _memory_child(work: Path, job_id: str, manifests: int, mode: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.bench_commit", "--memory-child"]
    out = subprocess.run(
        [*command, str(work), job_id, str(manifests), mode],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@benchmark("commit", "job commit: local FS vs v1 and the rename floor, 5 ms latency, S3 uploads")
def bench_commit(ctx: BenchContext) -> Iterable[Result]:
    local = measure_local(ctx.scale(100, 20), 100, repeats=ctx.scale(4, 1))
    label = f"{local['files']:,} files from {local['manifests']} manifests, local FS"
    yield Result(
        "commit",
        f"{label}, with cleanup, vs FileOutputCommitter v1",
        "s",
        local["ours"],
        local["v1"],
        "v1 job commit (mergePaths walk + renames)",
        goal=1.0,
        details=local,
    )
    yield Result(
        "commit",
        f"{label}, commit to _SUCCESS vs raw rename floor",
        "s",
        local["ours_to_success"],
        local["floor"],
        "fastest of an os.rename loop and 8 rename threads",
        goal=2.0,
        details=local,
    )
    latency = measure_latency(ctx.scale(20, 5), 100, 0.005)
    yield Result(
        "commit",
        f"{latency['files']:,} files, 5 ms per metadata call",
        "s",
        latency["ours_s"],
        latency["v1_s"],
        "sequential v1 through the same store",
        goal=0.2,
        details=latency,
    )
    s3 = measure_s3(ctx.scale(10, 2), 100)
    yield Result(
        "commit",
        f"complete {s3['uploads']:,} pending uploads on SeaweedFS",
        "s",
        s3["parallel_complete_s"],
        s3["sequential_complete_s"],
        "the same number completed one by one",
        goal=0.25,
        details=s3,
    )
    slow = measure_s3_latency(ctx.scale(10, 2), 100, 0.020)
    yield Result(
        "commit",
        f"complete {slow['uploads']:,} pending uploads on SeaweedFS, 20 ms per request",
        "s",
        slow["parallel_complete_s"],
        slow["sequential_complete_s"],
        "the same number completed one by one, same latency",
        goal=0.125,  # parallelism must show >= 8x when requests have latency
        details=slow,
    )
    memory = measure_memory(ctx.scale(100, 10), 10_000)
    yield Result(
        "commit",
        f"peak RSS growth loading {memory['manifests']} manifests x 10,000 entries",
        "MiB",
        memory["ours"]["peak_mib"],
        memory["naive"]["peak_mib"],
        "all manifests parsed and held (peak RSS growth, VmHWM)",
        details=memory,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--memory-child", nargs=4, metavar=("ROOT", "JOB", "N", "MODE"))
    args = parser.parse_args()
    if args.memory_child:
        root, job_id, manifests, mode = args.memory_child
        print(json.dumps(memory_child(Path(root), job_id, int(manifests), mode)))
        return
    for result in bench_commit(BenchContext(quick=args.quick)):
        print(json.dumps(result.as_json(), indent=2, default=str))


if __name__ == "__main__":
    main()
