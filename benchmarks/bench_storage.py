"""The storage primitive under the timeline append: ``write_if_absent`` of small JSON objects
at sequential keys (``timeline/<seq:020d>.json``), on the local filesystem and on SeaweedFS.

Each side has its baseline in the same run, in alternating rounds on fresh directories or
prefixes, so machine load hits both alike:

- local: ``LocalStorage.write_if_absent`` (temporary file, fsync, ``os.link``, directory
  fsync) against plain ``open``/``write``/``close`` of the same files. The details also give
  ``open``/``write``/``fsync``/``close``, to show how much of the gap is the fsync.
- S3: ``S3Storage.write_if_absent`` (``PutObject`` with ``If-None-Match: *``) against plain
  ``put_object`` with the same boto3 settings, without the condition.

SeaweedFS: ``LAKEWARDEN_S3__ENDPOINT_URL`` when set (bucket ``lakewarden-bench`` is created
there), otherwise a ``weed mini`` started for the run on free 127.0.0.1 ports and stopped by
pid at the end.

Run alone with ``python -m benchmarks.bench_storage [--quick]``; ``make bench`` runs it
through the registry.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from benchmarks._registry import BenchContext, Result, benchmark
from benchmarks._rounds import rotated_rounds
from lakewarden.settings import S3Settings, Settings
from lakewarden.storage import Storage
from lakewarden.storage.local import LocalStorage
from lakewarden.storage.s3 import S3Storage

BUCKET = "lakewarden-bench"


def entry_payload(seq: int) -> bytes:
    """A timeline-entry-sized JSON object (about 400 bytes)."""
    return json.dumps(
        {
            "seq": seq,
            "instant": f"20250101000000{seq % 1000:03d}",
            "action": "commit",
            "transition": "completed",
            "actor": "writer-7f3a",
            "lock_token": 42,
            "wall_time_ms": 1_735_689_600_000 + seq,
            "payload": {"stats": [{"file_group": f"fg-{i}", "records": 1000} for i in range(4)]},
        }
    ).encode()


def entry_key(seq: int) -> str:
    return f"timeline/{seq:020d}.json"


def _append_all(storage: Storage, payloads: list[bytes]) -> None:
    """The timeline append pattern: each entry created only if absent, at the next key."""
    for seq, payload in enumerate(payloads):
        storage.write_if_absent(entry_key(seq), payload)


def _rate(n: int, func: Callable[[], None]) -> float:
    """Operations per second of ``func`` doing ``n`` operations."""
    start = time.perf_counter()
    func()
    return n / (time.perf_counter() - start)


def measure_local(n: int, rounds: int) -> dict[str, Any]:
    """Rates (ops/s, median of ``rounds``) of ``n`` sequential appends on the local FS."""
    payloads = [entry_payload(seq) for seq in range(n)]
    root = Path(tempfile.mkdtemp(prefix="lakewarden-bench-storage-"))

    def ours(round_: int) -> float:
        return _rate(n, lambda: _append_all(LocalStorage(root / f"ours-{round_}"), payloads))

    def plain(round_: int, *, fsync: bool = False) -> float:
        directory = root / f"plain-{fsync}-{round_}" / "timeline"
        directory.mkdir(parents=True)

        def write_all() -> None:
            for seq, payload in enumerate(payloads):
                with open(directory / f"{seq:020d}.json", "wb") as out:
                    out.write(payload)
                    if fsync:
                        out.flush()
                        os.fsync(out.fileno())

        return _rate(n, write_all)

    try:
        rates = rotated_rounds(
            rounds,
            {"ours": ours, "plain": plain, "plain_fsync": lambda r: plain(r, fsync=True)},
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"n": n, **{name: statistics.median(r) for name, r in rates.items()}, "all": rates}


def measure_s3(settings: S3Settings, bucket: str, n: int, rounds: int) -> dict[str, Any]:
    """Rates (ops/s, median of ``rounds``) of ``n`` sequential appends on S3."""
    payloads = [entry_payload(seq) for seq in range(n)]
    run_prefix = f"bench-storage/{uuid.uuid4().hex}"
    client = _plain_client(settings)

    def ours(round_: int) -> float:
        storage = S3Storage(bucket, f"{run_prefix}/ours-{round_}", settings)
        # Create both clients (conditional requests have their own) and connections untimed.
        storage.exists("warm-up")
        storage.write_if_absent("warm-up", b"{}")
        return _rate(n, lambda: _append_all(storage, payloads))

    def plain(round_: int) -> float:
        prefix = f"{run_prefix}/plain-{round_}/"

        def put_all() -> None:
            for seq, payload in enumerate(payloads):
                client.put_object(Bucket=bucket, Key=prefix + entry_key(seq), Body=payload)

        return _rate(n, put_all)

    client.list_objects_v2(Bucket=bucket, MaxKeys=1)  # warm the plain client's connection too
    try:
        rates = rotated_rounds(rounds, {"ours": ours, "plain": plain})
    finally:
        _delete_prefix(client, bucket, run_prefix + "/")
    return {"n": n, **{name: statistics.median(r) for name, r in rates.items()}, "all": rates}


def _reveal(secret: SecretStr | None) -> str | None:
    return None if secret is None else secret.get_secret_value()


def _plain_client(settings: S3Settings) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "s3",
        endpoint_url=settings.endpoint_url,
        region_name=settings.region,
        # None: boto3's credential chain, as S3Storage does.
        aws_access_key_id=_reveal(settings.access_key_id),
        aws_secret_access_key=_reveal(settings.secret_access_key),
        config=Config(retries={"mode": "standard", "max_attempts": 3}),
    )


def _delete_prefix(client: Any, bucket: str, prefix: str) -> None:
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys = [{"Key": item["Key"]} for item in page.get("Contents", ())]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})


@contextmanager
def s3_endpoint() -> Iterator[tuple[S3Settings, str, str]]:
    """(settings, bucket, description) of the S3 endpoint to measure, started if needed.

    Raises:
        DevStackError: no endpoint configured and SeaweedFS could not be started.
    """
    configured = Settings().s3
    if configured.endpoint_url is not None:
        _ensure_bucket(configured)
        yield configured, BUCKET, f"external endpoint {configured.endpoint_url}"
        return
    from lakewarden.devstack.processes import free_port
    from lakewarden.devstack.s3 import SeaweedS3

    home = Path(tempfile.mkdtemp(prefix="lakewarden-bench-s3-"))
    server = SeaweedS3(home=home, port=free_port())
    try:
        server.start(bucket=BUCKET)
        settings = S3Settings(
            endpoint_url=server.endpoint_url,
            access_key_id=SecretStr(server.access_key),
            secret_access_key=SecretStr(server.secret_key),
        )
        yield settings, BUCKET, "SeaweedFS started for this run"
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


def _ensure_bucket(settings: S3Settings) -> None:
    from botocore.exceptions import ClientError

    try:
        _plain_client(settings).create_bucket(Bucket=BUCKET)
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") not in (
            "BucketAlreadyOwnedByYou",
            "BucketAlreadyExists",
        ):
            raise


def _result(where: str, numbers: dict[str, Any], baseline_label: str) -> Result:
    return Result(
        benchmark="storage",
        metric=f"write_if_absent of {numbers['n']:,} sequential entries, {where}",
        unit="ops/s",
        value=numbers["ours"],
        baseline=numbers["plain"],
        baseline_label=baseline_label,
        lower_is_better=False,
        details=numbers,
    )


@benchmark("storage", "write_if_absent at sequential keys vs plain writes, local FS and SeaweedFS")
def bench_storage(ctx: BenchContext) -> Iterable[Result]:
    rounds = ctx.scale(9, 2)
    local = measure_local(ctx.scale(1_000, 200), rounds)
    yield _result("local FS", local, "open/write/close (no fsync)")
    with s3_endpoint() as (settings, bucket, description):
        ctx.environment["s3"] = description
        s3 = measure_s3(settings, bucket, ctx.scale(1_000, 100), rounds)
    yield _result("SeaweedFS", s3, "put_object without If-None-Match")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small counts (a smoke run)")
    args = parser.parse_args()
    ctx = BenchContext(quick=args.quick)
    try:
        for result in bench_storage(ctx):
            print(json.dumps(result.as_json(), indent=2))
    finally:
        ctx.close()


if __name__ == "__main__":
    main()
