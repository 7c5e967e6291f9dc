"""8 clients x 200 acquire/release cycles on 5 tables never overlap on a table.

The check does not trust the service: every holder writes its own interval (after ``acquire``
returned, before ``release`` is sent) with the process-wide monotonic clock, and the test
checks that on each table no two intervals intersect and tokens increase with time.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

import pytest

from lakewarden.clients import LockClient
from lakewarden.settings import Settings
from lakewarden_services._common.process import ServiceProcess

pytestmark = pytest.mark.timeout(240)

CLIENTS = 8
CYCLES = 200
TABLES = [f"table-{i}" for i in range(5)]


@dataclass(frozen=True)
class Hold:
    table: str
    token: int
    start_ns: int
    end_ns: int
    client: int


def test_many_clients_never_overlap_on_a_table(
    shared_lock_settings: Settings,
    shared_lock_service: ServiceProcess,
    make_client: type[LockClient],
) -> None:
    clients = [make_client(shared_lock_settings, owner=f"c{i}") for i in range(CLIENTS)]
    holds: list[list[Hold]] = [[] for _ in range(CLIENTS)]
    errors: list[BaseException] = []
    start = threading.Barrier(CLIENTS)

    def run(i: int) -> None:
        rng = random.Random(i)
        try:
            start.wait()
            for _ in range(CYCLES):
                table = rng.choice(TABLES)
                with clients[i].hold(table, ttl_s=10, wait_s=60) as lease:
                    began = time.monotonic_ns()
                    if rng.random() < 0.1:
                        time.sleep(0.001)  # sometimes hold a little longer
                    ended = time.monotonic_ns()
                    assert not lease.lost
                holds[i].append(Hold(table, lease.token, began, ended, i))
        except BaseException as err:  # reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(200)
    assert not errors, errors[0]
    every = [hold for client_holds in holds for hold in client_holds]
    assert len(every) == CLIENTS * CYCLES

    for table in TABLES:
        mine = sorted((h for h in every if h.table == table), key=lambda h: h.start_ns)
        for before, after in zip(mine, mine[1:], strict=False):
            assert after.start_ns >= before.end_ns, f"overlap on {table}: {before} / {after}"
            assert after.token > before.token, f"token went back on {table}: {before} / {after}"
        tokens = [h.token for h in mine]
        assert len(set(tokens)) == len(tokens)
