"""The threads job commits run their stages' parallel work on, started once per service.

A ``ManifestCommitter`` given no pool starts a ``ThreadPoolExecutor`` for each job commit (and
each abort) and stops it at the end: thread starts and joins on every commit, which the commit
of a small job (a streaming micro-batch's) feels. ``CommitPools`` keeps the pools the service's
own committer settings size (``LAKEWARDEN_COMMITTER__THREADS``; by default one count on the
fast local path and another for stores with latency, ``CommitterOptions.threads_for``), each
started on the first commit that uses it and stopped when the service stops (``close``).

A request whose options ask for another thread count than the service's for its store gets
no pool here: its committer starts one of its own, as every commit did before, so a request
never resizes, nor leaves behind, the service's threads.

The tasks on these pools are the stages' store calls, submitted by the commit lane's thread
(``lakewarden.commit.stages._base.run_parallel``); none waits for another task of its pool, so
a full pool never waits for itself (``ManifestCommitter``'s ``pool``).
"""

from __future__ import annotations

import threading
from concurrent.futures import Executor, ThreadPoolExecutor

from lakewarden.commit import CommitterOptions
from lakewarden.storage import Storage

THREAD_NAME_PREFIX = "lw-jc-commit"


class CommitPools:
    """The service's committer pools, by thread count (thread-safe)."""

    def __init__(self, options: CommitterOptions) -> None:
        self.options = options  # the service's own (its settings, no request's)
        self._lock = threading.Lock()
        self._pools: dict[int, ThreadPoolExecutor] = {}
        self._closed = False

    def for_job(self, options: CommitterOptions, storage: Storage) -> Executor | None:
        """The pool for a job commit on ``storage`` with ``options``: the service's, started
        now if it is the first, when the job asks for the service's thread count on that
        store; else None (the committer starts its own, stopped when the job ends). None once
        closed too: a commit that a stopping service still runs gets threads of its own."""
        fast = _fast_local(storage)
        threads = options.threads_for(fast)
        if threads != self.options.threads_for(fast):
            return None
        with self._lock:
            if self._closed:
                return None
            pool = self._pools.get(threads)
            if pool is None:
                pool = ThreadPoolExecutor(threads, thread_name_prefix=THREAD_NAME_PREFIX)
                self._pools[threads] = pool
            return pool

    def close(self) -> None:
        """Stop every pool, waiting for its threads (no commit runs once the service's loop
        stopped: the commit in progress was finished and answered first)."""
        with self._lock:
            self._closed = True
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.shutdown(wait=True)


def _fast_local(storage: Storage) -> bool:
    """Whether a committer on ``storage`` takes the fast local path, as its store decides
    (``lakewarden.commit._store.CommitStore.fast``)."""
    return storage.capabilities.direct_file_access


__all__ = ["THREAD_NAME_PREFIX", "CommitPools"]
