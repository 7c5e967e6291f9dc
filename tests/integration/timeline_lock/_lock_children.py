"""Child processes for the failure tests (run as ``python _lock_children.py <mode> ...``).

Settings come from the environment (``LAKEWARDEN_KAFKA__*``). Each mode prints one line per
milestone on stdout (flushed) for the parent to wait on.

- ``hold <table> <ttl_s>``: take the lock, print ``HOLDING <token>``, then sleep (renewing)
  until killed.
- ``paused-writer <table uri> <trust|never-lost>``: upsert ids 1..3 (v="child") through a
  ``KafkaCoordinator`` that, once the lock for the ``completed`` step is granted, prints
  ``PAUSED <token>`` and stops itself with SIGSTOP (exactly what an external SIGSTOP at that
  point does). ``never-lost`` hands the transaction a lease that never reports lost, so only
  the log can stop the late append. Prints ``RESULT ok`` or ``RESULT <ErrorClass>: ...``.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa

from lakewarden.api.table import Table
from lakewarden.clients import KafkaCoordinator, LockClient
from lakewarden.settings import Settings
from lakewarden.table.coordinator import Lease

STEP_COMPLETED = 3  # a write takes the lock for requested, inflight, then completed


class PausingCoordinator(KafkaCoordinator):
    def __init__(self, settings: Settings, *, ttl_s: float, trust_lease: bool) -> None:
        super().__init__(settings)
        self.ttl_s = ttl_s
        self.trust_lease = trust_lease
        self.locks = 0

    @contextmanager
    def lock(  # type: ignore[override]
        self, table_id: str, *, ttl_s: float = 30.0, wait_s: float = 30.0
    ) -> Iterator[Lease]:
        self.locks += 1
        with super().lock(table_id, ttl_s=self.ttl_s, wait_s=wait_s) as lease:
            if self.locks == STEP_COMPLETED:
                print(f"PAUSED {lease.token}", flush=True)
                os.kill(os.getpid(), signal.SIGSTOP)
                print("RESUMED", flush=True)
            if self.trust_lease:
                yield lease
            else:
                yield Lease(table_id, lease.token, lease.ttl_s, expires_at=math.inf)


def hold(table: str, ttl_s: float) -> None:
    client = LockClient(Settings(), owner="doomed-holder")
    lease = client.acquire(table, ttl_s=ttl_s, wait_s=30)
    print(f"HOLDING {lease.token}", flush=True)
    while True:
        time.sleep(1)


def paused_writer(uri: str, variant: str) -> None:
    # The writer's own `completed` append is what this child pauses in: its job commit stays
    # in this process (the opt-out), not with job-committer.
    settings = Settings()
    settings = settings.model_copy(
        update={"kafka": settings.kafka.model_copy(update={"job_commits": "embedded"})}
    )
    coordinator = PausingCoordinator(settings, ttl_s=2.0, trust_lease=variant == "trust")
    table = Table.open(uri, coordinator=coordinator)
    batch = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": ["child"] * 3})
    try:
        result = table.write(batch, operation="upsert")
        print(f"RESULT ok {result.instant}", flush=True)
    except Exception as err:
        print(f"RESULT {type(err).__name__}: {err}", flush=True)
    finally:
        coordinator.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)
    mode, *args = sys.argv[1:]
    if mode == "hold":
        hold(args[0], float(args[1]))
    elif mode == "paused-writer":
        paused_writer(args[0], args[1])
    else:
        raise SystemExit(f"unknown mode {mode}")
