"""What writers need from the outside world: a table lock with a fencing token, and liveness.

``Coordinator`` is the interface; ``EmbeddedCoordinator`` is the in-process implementation
used when no Kafka is configured (the Kafka-backed one, ``lakewarden.clients.KafkaCoordinator``,
talks to the timeline-lock and heartbeat-monitor services). Which one a table gets is decided
in one place, ``lakewarden.api.connection``; everything else receives it. The lock makes
writers of one table take turns, which keeps instant times increasing and rebases rare;
**safety never depends on it**. Two processes each have their own embedded coordinator, a lease
can expire while its holder is paused, and the log (``write_if_absent`` at the tail, the state
machine, the conflict rules) keeps them safe anyway.
Every entry records the token of the lease its writer held, for audit.
"""

from __future__ import annotations

import abc
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from lakewarden.errors import NonRetryableError, RetryableError
from lakewarden.table.timeline_state import TimelineEntry

if TYPE_CHECKING:
    from lakewarden.commit.stages.task import TaskCommitResult
    from lakewarden.settings import HeartbeatSettings
    from lakewarden.table.job_commit import CommitRequest
    from lakewarden.table.stats import CommitStats


class Liveness(StrEnum):
    """Whether the executor of an instant is known to be working on it."""

    ALIVE = "alive"
    DEAD = "dead"
    UNKNOWN = "unknown"


class LockTimeoutError(RetryableError):
    """The table lock was not granted within ``wait_s``."""


class LeaseLostError(RetryableError):
    """The holder's lease was lost (expired or not renewable) before it appended an entry;
    nothing was appended. Take the lock again and re-validate against the reloaded log."""


class LockReentryError(NonRetryableError):
    """The thread asked for a table lock it already holds (it would wait for itself)."""


@dataclass(eq=False)
class Lease:
    """A grant of the table lock. ``token`` increases with every grant per table (fencing)."""

    table_id: str
    token: int
    ttl_s: float
    expires_at: float = field(repr=False)  # time.monotonic() deadline
    released: bool = field(default=False, repr=False)

    @property
    def lost(self) -> bool:
        """Released, or expired (another writer may hold the lock now)."""
        return self.released or time.monotonic() >= self.expires_at


# HeartbeatPolicy's defaults (10 s x 3), for coordinators without settings.
DEFAULT_HEARTBEAT_TOLERANCE_S = 30.0


class JobCommits(Protocol):
    """A service that runs job commits (job-committer): the instant's job commit and its
    ``completed`` entry, or its rollback, done elsewhere while the writer waits."""

    def commit_job(
        self,
        *,
        table_uri: str,
        table_id: str,
        spec: CommitRequest,
        tasks: Sequence[TaskCommitResult],
    ) -> CommitStats:
        """Announce the ``tasks``' manifests, ask for the commit of ``spec``, wait for it.

        Raises:
            JobCommitFailedError: the service failed it (rolled back, the job aborted).
            CommitStateUnknownError: no answer in time; the request is durable and may still
                complete (nothing was rolled back or deleted).
            CommitServiceUnavailableError: the topics cannot be reached (nothing was sent).
        """
        ...


class TableLock(abc.ABC):
    """The table lock: per-table mutual exclusion with fenced leases, FIFO. Taken by every step
    that appends to a timeline (``WriteTransaction``, scheduling, cancelling, cleaning)."""

    @abc.abstractmethod
    def lock(
        self, table_id: str, *, ttl_s: float = 30.0, wait_s: float = 30.0
    ) -> AbstractContextManager[Lease]:
        """Hold the table lock for the ``with`` block; grants are FIFO.

        Raises: LockTimeoutError when not granted within ``wait_s``.
        """

    def lock_ahead(self, table_id: str, *, ttl_s: float = 30.0) -> None:
        """Say that ``lock(table_id, ttl_s=ttl_s)`` comes next: a coordinator whose lock lives
        in another process may send the acquire now, so that its round trip overlaps the
        caller's work until that ``lock``, which then waits for this acquire's grant instead
        of sending another (the grant, not this call, starts the lock section: nothing is
        held before ``lock`` returns). Call ``drop_lock_ahead`` once done: it withdraws an
        acquire no ``lock`` took up. The embedded coordinator's lock is in-process: nothing
        to send ahead. Never raises."""
        return None

    def drop_lock_ahead(self, table_id: str) -> None:
        """Withdraw the acquire of ``table_id`` sent by ``lock_ahead`` that no ``lock`` took up
        (the service gives the lock up if it granted it meanwhile). Never raises."""
        return None


class Heartbeating(abc.ABC):
    """This process's own heartbeats: an executor declares its instant alive while it works,
    and checks before completing that the beats were delivered."""

    @abc.abstractmethod
    def heartbeat(self, table_id: str, instant: str, owner: str) -> AbstractContextManager[None]:
        """Declare ``instant`` alive (executed by ``owner``) for the ``with`` block."""

    def check_heartbeat(self, table_id: str, instant: str) -> None:
        """Return when this process may still complete ``instant``: its heartbeat, if it holds
        one, has been delivered within a tolerance window. A writer whose heartbeat was lost
        may already have been declared dead and rolled back by the cleaner, so it must stop.

        The embedded coordinator's heartbeats cannot be lost (nothing is delivered anywhere).

        Raises: a NonRetryableError subclass (``HeartbeatLostError``) when the heartbeat is lost.
        """
        return None


class ExecutorLiveness(abc.ABC):
    """What is known about the executors of instants: asked before anything destructive is
    done to another executor's instant (``lakewarden.table.death``, rollback, a plan's claim,
    the error table's resume)."""

    @abc.abstractmethod
    def liveness(self, table_id: str, instant: str) -> Liveness:
        """Whether the executor of ``instant`` is alive, known dead, or unknown."""

    def executor_of(self, table_id: str, instant: str) -> str | None:
        """The owner named by the instant's latest heartbeat, when known (for error messages:
        "plan P is executed by X"); None when nobody is known."""
        return None

    def monitors_liveness(self) -> bool:
        """Whether a liveness monitor (heartbeat-monitor) judges the executors of other
        processes for this coordinator. False for the embedded coordinator, which sees only
        its own process's heartbeats: there a plan's claim mark is the only evidence about
        another process's executor (``lakewarden.table.death``)."""
        return False

    def never_heard_of(self, table_id: str, instant: str) -> bool:
        """True only when the liveness service answered and has no record of ``instant``: its
        executor never beat, or was judged so long ago that the record was forgotten. False
        when a record exists or nobody can be asked (the embedded coordinator knows only its
        own process's heartbeats, so it never claims this)."""
        return False

    def heartbeat_tolerance_s(self, table_id: str) -> float:
        """How long after its last beat an executor of ``table_id`` is declared dead (the
        heartbeat policy's ``interval_s * tolerable_misses``; the default policy's 30 s here).
        A plan's claim mark counts this long (``lakewarden.tableservice.claim``)."""
        return DEFAULT_HEARTBEAT_TOLERANCE_S


class TimelineAudit:
    """Telling the outside world about a table's timeline: where the table lives and which
    entries this process appended (the Kafka coordinator's ``TimelineTransition`` events and
    the cleaner's registration; the embedded coordinator has nobody to tell). Best effort:
    storage is the truth."""

    def register_table(self, table_id: str, uri: str) -> None:
        """Learn where ``table_id`` lives (no IO). The Kafka coordinator registers the table
        with the cleaner at the first of its entries it announces
        (``lakewarden.clients.clean_registration``); the embedded one has no cleaner to tell."""
        return None

    def before_requested(self, table_id: str, actor: str) -> None:
        """Called before this process appends a ``requested`` entry to ``table_id``. The Kafka
        coordinator registers the table with the cleaner here when this process has not yet
        (a writer killed between its first ``requested`` and that entry's announcement would
        otherwise leave a dead instant in a table no cleaner knows). Best effort, never
        raises; the embedded coordinator has no cleaner to tell."""
        return None

    def announce(self, table_id: str, entry: TimelineEntry) -> None:
        """Tell the audit trail that ``entry`` was appended to the table's timeline (the
        Kafka coordinator publishes a ``TimelineTransition``; the embedded one has nowhere to
        tell). Best effort and never raises: storage is the truth and the entry is already
        there; an announcement that is lost shows up in ``lakewarden replay`` as an entry the
        timeline topic lacks."""
        return None


class Coordinator(TableLock, Heartbeating, ExecutorLiveness, TimelineAudit):
    """What a table's writers need from the outside world, in one object as a table holds it:

    ``TableLock``         lock, lock_ahead, drop_lock_ahead
    ``Heartbeating``      heartbeat, check_heartbeat (this process's own executors)
    ``ExecutorLiveness``  liveness, executor_of, monitors_liveness, never_heard_of,
                          heartbeat_tolerance_s (other executors, judged before a destructive
                          step)
    ``TimelineAudit``     register_table, before_requested, announce
    ``job_commits``       where ``Table.write`` hands its job commit
    ``connect``, ``close`` its clients started ahead, and released

    A function that needs one role takes that role (``death.verdict`` takes an
    ``ExecutorLiveness``, the Spark driver's heartbeat keeper a ``Heartbeating``); one that
    appends to a timeline takes the whole coordinator (lock, heartbeat, audit)."""

    def job_commits(self) -> JobCommits | None:
        """Where ``Table.write`` hands its job commit: None (the embedded coordinator) runs it
        in the writer's process (``commit_instant``); the Kafka coordinator answers
        job-committer when the settings say so (``kafka.commits_by_service``)."""
        return None

    def connect(self, *, writes: bool = True) -> None:
        """Start the coordinator's clients now rather than at their first use (a process that
        will write pays for them before its first write waits on them). ``writes``: also the
        clients only a writer uses (heartbeats, the cleaner registration); a service that
        appends no writes' entries (the cleaner) passes False. Never raises: what did not
        connect connects at first use. The embedded one has none."""
        return None

    def close(self) -> None:
        """Release what the coordinator holds (leases, clients); the embedded one holds none."""
        return None


class _TableLock:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.holder: Lease | None = None
        self.holder_thread: int | None = None
        self.last_token = 0
        self.queue: deque[object] = deque()


class EmbeddedCoordinator(Coordinator):
    """In-process coordinator: a FIFO lock per table and liveness from the heartbeats of this
    process. A lease whose ``ttl_s`` passed may be taken over by a waiter; its holder sees
    ``lease.lost``. Liveness is ``UNKNOWN`` for instants this process never heard of (another
    process may be executing them). ``heartbeat``: the configured heartbeat policies, whose
    tolerance a plan's claim mark counts (``heartbeat_tolerance_s``; default: the default
    policy's 30 s)."""

    def __init__(self, heartbeat: HeartbeatSettings | None = None) -> None:
        self._heartbeat = heartbeat
        self._guard = threading.Lock()
        self._tables: dict[str, _TableLock] = {}
        self._beating: dict[tuple[str, str], int] = {}
        self._ended: set[tuple[str, str]] = set()
        self._owners: dict[tuple[str, str], str] = {}

    def heartbeat_tolerance_s(self, table_id: str) -> float:
        """The table's configured heartbeat policy's tolerance: how long another process's
        claim mark holds a plan (``lakewarden.tableservice.claim``)."""
        if self._heartbeat is None:
            return super().heartbeat_tolerance_s(table_id)
        return self._heartbeat.policy_for(table_id).tolerance_s

    @contextmanager
    def lock(self, table_id: str, *, ttl_s: float = 30.0, wait_s: float = 30.0) -> Iterator[Lease]:
        table = self._table(table_id)
        lease = self._acquire(table, table_id, ttl_s=ttl_s, wait_s=wait_s)
        try:
            yield lease
        finally:
            with table.cond:
                lease.released = True
                if table.holder is lease:
                    table.holder = None
                    table.holder_thread = None
                    table.cond.notify_all()

    def _table(self, table_id: str) -> _TableLock:
        with self._guard:
            return self._tables.setdefault(table_id, _TableLock())

    def _acquire(self, table: _TableLock, table_id: str, *, ttl_s: float, wait_s: float) -> Lease:
        me = threading.get_ident()
        deadline = time.monotonic() + wait_s
        with table.cond:
            if table.holder is not None and not table.holder.lost and table.holder_thread == me:
                raise LockReentryError(
                    f"this thread already holds the lock of table {table_id} (token "
                    f"{table.holder.token}). Help: do the work inside the first `with` block.",
                    table=table_id,
                )
            ticket = object()
            table.queue.append(ticket)
            while True:
                now = time.monotonic()
                free = table.holder is None or table.holder.lost
                if free and table.queue[0] is ticket:
                    table.queue.popleft()
                    table.last_token += 1
                    lease = Lease(table_id, table.last_token, ttl_s, expires_at=now + ttl_s)
                    table.holder, table.holder_thread = lease, me
                    table.cond.notify_all()  # the next in line re-checks its place
                    return lease
                if now >= deadline:
                    table.queue.remove(ticket)
                    table.cond.notify_all()
                    raise LockTimeoutError(
                        f"the lock of table {table_id} was not granted within {wait_s:g} s. "
                        "Help: retry; a writer holding it for long should use a longer ttl.",
                        table=table_id,
                    )
                wake = deadline
                if table.holder is not None:
                    wake = min(wake, table.holder.expires_at)
                table.cond.wait(timeout=max(wake - now, 0.001))

    def liveness(self, table_id: str, instant: str) -> Liveness:
        key = (table_id, instant)
        with self._guard:
            if self._beating.get(key, 0) > 0:
                return Liveness.ALIVE
            return Liveness.DEAD if key in self._ended else Liveness.UNKNOWN

    def executor_of(self, table_id: str, instant: str) -> str | None:
        with self._guard:
            return self._owners.get((table_id, instant))

    @contextmanager
    def heartbeat(self, table_id: str, instant: str, owner: str) -> Iterator[None]:
        key = (table_id, instant)
        with self._guard:
            self._beating[key] = self._beating.get(key, 0) + 1
            self._owners[key] = owner
            self._ended.discard(key)
        try:
            yield
        finally:
            with self._guard:
                self._beating[key] -= 1
                if self._beating[key] == 0:
                    del self._beating[key]
                    self._ended.add(key)
