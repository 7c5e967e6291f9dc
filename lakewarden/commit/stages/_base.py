"""The stage machinery, after Hadoop's ``AbstractJobOrTaskStage``.

A stage is a class with typed arguments and result. ``run`` may be called once; it times the
stage (statistic ``<stage name>`` in the committer's ``CommitStatistics``, failures counted
as ``<stage name>.failures``), calls the optional ``stage_hook("start"|"end", name)`` (tests
raise from it to crash between stages) and the fault points ``commit.stage.start`` /
``commit.stage.end`` (``lakewarden.faults``: a test's plan reaches a service process), and
turns any ``Exception`` into a ``StageFailedError`` naming the stage. A ``BaseException``
that is not an ``Exception`` (a simulated crash, ``KeyboardInterrupt``) passes through
untouched, as a real crash would.

``run_parallel`` is the thread-pool helper every parallel stage uses: bounded in-flight work
(so a stage never holds more than a few manifests' entries), and the first failure stops the
rest (a shared ``threading.Event`` that workers check between items).
"""

from __future__ import annotations

import abc
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from dataclasses import dataclass, field
from typing import ClassVar, Generic, TypeVar, cast

import lakewarden.faults as faults
from lakewarden.commit._store import CommitStore
from lakewarden.commit.errors import stage_failed
from lakewarden.commit.layout import JobLayout
from lakewarden.commit.options import CommitterOptions

log = logging.getLogger("lakewarden.commit")

A = TypeVar("A")
R = TypeVar("R")
T = TypeVar("T")
I = TypeVar("I")  # noqa: E741
StageHook = Callable[[str, str], None]


@dataclass(frozen=True)
class StageConfig:
    """What every stage of one job (or task attempt) shares (Hadoop's ``StageConfig``)."""

    store: CommitStore
    layout: JobLayout
    options: CommitterOptions = field(default_factory=CommitterOptions)
    pool: Executor | None = None
    stage_hook: StageHook | None = None

    @property
    def job_id(self) -> str:
        return self.layout.job_id

    @property
    def batch(self) -> int:
        return self.options.batch_for(self.store.fast)


class Stage(abc.ABC, Generic[A, R]):
    """One step of the protocol; subclasses set ``name`` and implement ``_execute``."""

    name: ClassVar[str]

    def __init__(self, config: StageConfig) -> None:
        self.config = config
        self._used = False

    @property
    def store(self) -> CommitStore:
        return self.config.store

    @property
    def layout(self) -> JobLayout:
        return self.config.layout

    def run(self, args: A) -> R:
        """Run the stage once.

        Raises:
            StageFailedError: any failure inside the stage, naming it (cause in ``__cause__``).
            RuntimeError: the stage object was run before.
        """
        if self._used:
            raise RuntimeError(f"stage {self.name} was already run; create a new one")
        self._used = True
        hook = self.config.stage_hook
        start, failed = time.perf_counter(), True
        try:
            if hook is not None:
                hook("start", self.name)
            faults.point("commit.stage.start", stage=self.name)
            result = self._execute(args)
            if hook is not None:
                hook("end", self.name)
            faults.point("commit.stage.end", stage=self.name)
            failed = False
            return result
        except Exception as err:
            raise stage_failed(self.name, self.config.job_id, err) from err
        finally:
            elapsed = time.perf_counter() - start
            self.store.stats.record(self.name, elapsed, failed=failed)
            log.debug(
                "stage %s of job %s %s in %.3f s",
                self.name,
                self.config.job_id,
                "failed" if failed else "finished",
                elapsed,
            )

    @abc.abstractmethod
    def _execute(self, args: A) -> R:
        """The stage's work; numbered steps in the subclass docstring."""

    def parallel(
        self,
        items: Iterable[I],
        work: Callable[[I, threading.Event], T],
        *,
        max_in_flight: int | None = None,
    ) -> list[T]:
        """``run_parallel`` on this job's pool (inline when there is none)."""
        limit = max_in_flight or self.config.options.threads_for(self.store.fast) * 2
        return run_parallel(self.config.pool, items, work, max_in_flight=limit)


def run_parallel(
    pool: Executor | None,
    items: Iterable[I],
    work: Callable[[I, threading.Event], T],
    *,
    max_in_flight: int,
) -> list[T]:
    """``work(item, stop)`` for every item, results in item order.

    At most ``max_in_flight`` items are submitted at once. The first failure sets ``stop``,
    cancels what has not started, waits for what runs, and is re-raised (a ``BaseException``
    too). Without a pool, or with a single item (a small job's one chunk: handing it to a
    worker and back costs more than the item), the items run inline, in order.
    """
    stop = threading.Event()
    iterator: Iterator[tuple[int, I]] = iter(enumerate(items))
    head = [pair for pair in (next(iterator, None), next(iterator, None)) if pair is not None]
    if pool is None or len(head) < 2:
        return [work(item, stop) for _, item in itertools.chain(head, iterator)]

    def guarded(item: I) -> T | None:
        if stop.is_set():
            return None  # a failure elsewhere: this item is not started (result unused)
        try:
            return work(item, stop)
        except BaseException:
            stop.set()  # at once, from the failing worker: queued items must not start
            raise

    results: dict[int, T | None] = {}
    running: dict[Future[T | None], int] = {}
    failure: BaseException | None = None
    iterator = itertools.chain(head, iterator)
    exhausted = False
    while True:
        while not exhausted and failure is None and len(running) < max_in_flight:
            nxt = next(iterator, None)
            if nxt is None:
                exhausted = True
                break
            running[pool.submit(guarded, nxt[1])] = nxt[0]
        if not running:
            break
        done, _ = wait(running, return_when=FIRST_COMPLETED)
        for future in done:
            index = running.pop(future)
            error = future.exception()
            if error is None:
                results[index] = future.result()
            elif failure is None:
                failure = error
                stop.set()
    if failure is not None:
        raise failure
    return [cast(T, results[i]) for i in range(len(results))]
