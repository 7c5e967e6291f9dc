"""The task manifests job-committer holds from ``TaskManifest`` events, until their job commits.

``ManifestHandler`` adds every announced attempt of a job: its manifest, rebuilt from the
event (``AnnouncedManifest``), or None when the event is a pointer (the manifest was too
large for a Kafka message). ``RequestHandler`` takes a job's manifests before running its
commit; the job commit then loads those from memory and reads storage only for the rest
(``lakewarden.commit.stages.load``).

Why this is safe to lose: the manifests in storage stay the durable record. A restarted or
rebalanced instance holds nothing for the jobs it did not see and reads them from storage,
as it would without events. job.requests and task.manifests have the same partition count
and key (the table id), and the loop's ``range`` assignment gives a table's partitions of both
to one instance.

Bounded: at most ``max_bytes`` of manifests (the oldest jobs are dropped first), and a job
whose commit request never came (its driver died) is dropped after ``max_age_s``.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from lakewarden.commit import AnnouncedManifest


class HeldManifestSettings(BaseSettings):
    """``LAKEWARDEN_JOB_COMMITTER_<FIELD>``: how job-committer holds announced manifests."""

    model_config = SettingsConfigDict(
        env_prefix="LAKEWARDEN_JOB_COMMITTER_", frozen=True, extra="ignore"
    )

    manifest_wait_s: float = Field(
        default=2.0,
        ge=0,
        description="how long a commit request waits for TaskManifest events of its accepted "
        "attempts that have not been read yet (they are sent before the request, on another "
        "topic); past it, the missing manifests are read from storage",
    )
    held_manifest_bytes: int = Field(
        default=256 * 1024 * 1024,
        ge=0,
        description="manifest bytes held at most; past it the oldest jobs' are dropped (their "
        "commits read storage). 0 holds none",
    )
    held_manifest_age_s: float = Field(
        default=3600.0,
        gt=0,
        description="a job's manifests are dropped this long after its last TaskManifest event "
        "when no commit request took them",
    )


JobKey = tuple[str, str]  # (table id, job id)


class _Job:
    __slots__ = ("manifests", "size", "touched")

    def __init__(self, now: float) -> None:
        self.manifests: dict[str, AnnouncedManifest | None] = {}
        self.size = 0
        self.touched = now


class HeldManifests:
    """Announced manifests by job. Thread-safe (added on the manifest lane, taken on the
    commit lane)."""

    def __init__(
        self,
        *,
        max_bytes: int = 256 * 1024 * 1024,
        max_age_s: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.clock = clock
        self._lock = threading.Lock()
        self._added = threading.Condition(self._lock)
        self._jobs: OrderedDict[JobKey, _Job] = OrderedDict()
        self._size = 0

    @property
    def size(self) -> int:
        """Bytes of manifests held."""
        with self._lock:
            return self._size

    def add(
        self, table_id: str, job_id: str, attempt: str, manifest: AnnouncedManifest | None
    ) -> None:
        """Hold ``attempt``'s manifest (None: the attempt announced only a pointer)."""
        now = self.clock()
        with self._lock:
            self._expire(now)
            key = (table_id, job_id)
            job = self._jobs.get(key)
            if job is None:
                job = self._jobs[key] = _Job(now)
            self._jobs.move_to_end(key)
            job.touched = now
            old = job.manifests.get(attempt)
            if old is not None:
                job.size -= len(old.data)
                self._size -= len(old.data)
            if manifest is not None and len(manifest.data) > self.max_bytes:
                manifest = None  # held as a pointer: the commit reads it
            job.manifests[attempt] = manifest
            added = len(manifest.data) if manifest is not None else 0
            job.size += added
            self._size += added
            self._evict(keep=key)
            self._added.notify_all()

    def known(self, table_id: str, job_id: str, attempts: Iterable[str]) -> bool:
        """Whether every one of ``attempts`` was announced (with its manifest or a pointer)."""
        with self._lock:
            return self._known(table_id, job_id, list(attempts))

    def _known(self, table_id: str, job_id: str, wanted: list[str]) -> bool:
        job = self._jobs.get((table_id, job_id))
        if job is None:
            return not wanted
        return all(a in job.manifests for a in wanted)

    def take(
        self, table_id: str, job_id: str, attempts: Iterable[str]
    ) -> dict[str, AnnouncedManifest]:
        """The held manifests of ``attempts`` (those announced with their manifest); the job's
        entry stays until ``forget`` (a failed commit is retried)."""
        with self._lock:
            job = self._jobs.get((table_id, job_id))
            if job is None:
                return {}
            return {a: m for a in attempts if (m := job.manifests.get(a)) is not None}

    def forget(self, table_id: str, job_id: str) -> None:
        """Drop a job's manifests (its commit request was answered)."""
        with self._lock:
            job = self._jobs.pop((table_id, job_id), None)
            if job is not None:
                self._size -= job.size

    def wait_for(
        self, table_id: str, job_id: str, attempts: Iterable[str], timeout_s: float
    ) -> bool:
        """Wait up to ``timeout_s`` (on the commit lane's thread, while the manifest lane
        keeps reading) until every one of ``attempts`` was announced; whether they all were."""
        wanted = list(attempts)
        deadline = time.monotonic() + timeout_s
        with self._added:
            while not self._known(table_id, job_id, wanted):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._added.wait(left)
            return True

    def _expire(self, now: float) -> None:
        while self._jobs:
            key, job = next(iter(self._jobs.items()))
            if now - job.touched < self.max_age_s:
                return
            del self._jobs[key]
            self._size -= job.size

    def _evict(self, *, keep: JobKey) -> None:
        """Drop the oldest jobs until the bytes held fit (the job just added last)."""
        while self._size > self.max_bytes and len(self._jobs) > 1:
            key = next(iter(self._jobs))
            if key == keep:
                break
            self._size -= self._jobs.pop(key).size
        job = self._jobs.get(keep)
        if self._size > self.max_bytes and job is not None:
            # One job alone is over the budget: keep its attempts known, hold no manifests.
            job.manifests = dict.fromkeys(job.manifests)
            self._size -= job.size
            job.size = 0
