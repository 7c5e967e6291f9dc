"""The process's shared worker threads for the writer's per-bucket work.

A write's buckets run on threads (pyarrow releases the GIL in the gather and the encoding).
Starting a pool per write costs one thread start per worker on every write, which a small
write feels; this pool is started once and kept for the process. A forked child gets a pool
of its own (a parent's threads do not exist in the child).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_lock = threading.Lock()
_pools: dict[tuple[int, int], ThreadPoolExecutor] = {}


def shared_pool(threads: int) -> ThreadPoolExecutor:
    """The process's pool of ``threads`` workers, created on first use. Its tasks must not
    wait for other tasks of the same pool (a full pool would wait for itself)."""
    key = (os.getpid(), max(1, threads))
    with _lock:
        pool = _pools.get(key)
        if pool is None:
            pool = ThreadPoolExecutor(key[1], thread_name_prefix="lw-write")
            _pools[key] = pool
        return pool
