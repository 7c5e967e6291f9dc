"""Helpers shared by the storage tests (imported as a top-level module, like the fixtures)."""

from __future__ import annotations

import threading
from collections.abc import Callable


def race(threads: int, attempt: Callable[[int], None]) -> tuple[list[int], list[Exception]]:
    """Run ``attempt(i)`` in ``threads`` threads released together; winners and errors."""
    barrier = threading.Barrier(threads)
    winners: list[int] = []
    errors: list[Exception] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        barrier.wait()
        try:
            attempt(i)
        except Exception as err:  # collected and asserted on below
            with lock:
                errors.append(err)
        else:
            with lock:
                winners.append(i)

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return winners, errors
