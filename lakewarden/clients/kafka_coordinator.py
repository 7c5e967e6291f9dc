"""KafkaCoordinator: the table lock of every timeline transaction held at timeline-lock.

    table = Table.open(uri, coordinator=KafkaCoordinator(settings))
    connection = lakewarden.table.connect(settings)                 # Kafka when configured

``lakewarden.api.connection`` is the one place that chooses this coordinator from settings;
this module only implements it.

Each ``WriteTransaction`` step takes the table's lease from timeline-lock; its fencing token
goes into the entry appended, and a lease lost before the append stops it (``LeaseLostError``).
Writers in different processes and on different machines take turns on one lock, FIFO.

Every entry appended through it is announced on the timeline topic (``announce``, by
``TimelinePublisher``), the source of ``lakewarden replay``; a table's first announced entry
also registers the table with the cleaner (``CleanerRegistration``). Heartbeats and liveness go to
heartbeat-monitor: ``heartbeat`` publishes beats for the
instant while its block runs (``lakewarden.clients.heartbeat.Heartbeats``), and ``liveness``
answers ALIVE for an instant this process beats for and is healthy, else the monitor's verdict
from its changelog (``lakewarden.clients.liveness.Liveness``); UNKNOWN when the monitor's view
cannot be read (never "dead" on a guess: callers act destructively on DEAD).
With ``kafka.job_commits == "service"`` (the default) it hands ``Table.write``'s job commits to
job-committer (``job_commits``, ``lakewarden.clients.service_commits``); ``embedded`` keeps
them in the writing process.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from lakewarden.clients._lock_wire import ttl_ms
from lakewarden.clients.clean_registration import CleanerRegistration
from lakewarden.clients.heartbeat import Heartbeats
from lakewarden.clients.liveness import Liveness as LivenessView
from lakewarden.clients.liveness import LivenessUnavailableError
from lakewarden.clients.lock import LockClient, LockLease, Pending
from lakewarden.clients.service_commits import ServiceJobCommits
from lakewarden.clients.timeline_events import TimelinePublisher
from lakewarden.errors import ConfigurationError, LakewardenError
from lakewarden.events.topics import (
    HEARTBEATS,
    LOCK_REPLIES,
    LOCK_REQUESTS,
    TIMELINE,
    TopicSpec,
)
from lakewarden.settings import Settings
from lakewarden.table.coordinator import Coordinator, JobCommits, Liveness, LockReentryError
from lakewarden.table.timeline_state import TimelineEntry

log = logging.getLogger(__name__)

# What a KafkaCoordinator produces to: a service that commits through one ensures them at start
# (timeline-lock and heartbeat-monitor create theirs too, but need not have run yet). Without
# the timeline topic every append would wait for its announcement to time out.
COORDINATOR_TOPICS: tuple[TopicSpec, ...] = (LOCK_REQUESTS, LOCK_REPLIES, HEARTBEATS, TIMELINE)


class KafkaCoordinator(Coordinator):
    """``Coordinator`` whose table lock is timeline-lock's lease (via one ``LockClient``)."""

    def __init__(
        self,
        settings: Settings,
        *,
        client: LockClient | None = None,
        owner: str | None = None,
        heartbeats: Heartbeats | None = None,
        liveness_view: LivenessView | None = None,
        timeline_events: TimelinePublisher | None = None,
        registration: CleanerRegistration | None = None,
    ) -> None:
        self.settings = settings
        self.client = client if client is not None else LockClient(settings, owner=owner)
        self._owns_client = client is None
        self.heartbeats = heartbeats if heartbeats is not None else Heartbeats(settings)
        self._owns_heartbeats = heartbeats is None
        self.liveness_view = liveness_view if liveness_view is not None else LivenessView(settings)
        self._owns_view = liveness_view is None
        self.timeline_events = timeline_events or TimelinePublisher(settings)
        self._owns_timeline_events = timeline_events is None
        self.registration = registration or CleanerRegistration(settings)
        self._owns_registration = registration is None
        self._guard = threading.Lock()
        self._held: dict[tuple[str, int], LockLease] = {}
        self._ahead: dict[str, Pending] = {}  # by table: an acquire sent by lock_ahead
        self._job_commits: ServiceJobCommits | None = None
        if settings.kafka.commits_by_service:
            self._job_commits = ServiceJobCommits(
                settings, producer_id=f"writer:{self.client.owner}"
            )

    def job_commits(self) -> JobCommits | None:
        """job-committer when ``kafka.job_commits`` is ``service`` (the default), else None
        (``embedded``: the writing process commits)."""
        return self._job_commits

    @contextmanager
    def lock(
        self, table_id: str, *, ttl_s: float = 30.0, wait_s: float = 30.0
    ) -> Iterator[LockLease]:
        """Hold the table's lease for the ``with`` block (renewed in the background).

        Raises:
            LockReentryError: this thread holds the table's lock already (it would wait for
                itself until ``wait_s``).
            LockTimeoutError: not granted within ``wait_s``.
            LockRefusedError, LockServiceUnavailableError: see ``LockClient.acquire``.
        """
        key = (table_id, threading.get_ident())
        with self._guard:
            held = self._held.get(key)
            ahead = self._ahead.pop(table_id, None)
        if ahead is not None and ahead.ttl_ms != ttl_ms(ttl_s):
            self.client.withdraw(ahead)  # sent for a lock section with another ttl
            ahead = None
        if held is not None and not held.lost:
            if ahead is not None:
                self.client.withdraw(ahead)
            raise LockReentryError(
                f"this thread already holds the lock of table {table_id} (token {held.token}). "
                "Help: do the work inside the first `with` block.",
                table=table_id,
            )
        with self.client.hold(table_id, ttl_s=ttl_s, wait_s=wait_s, sent=ahead) as lease:
            with self._guard:
                self._held[key] = lease
            try:
                yield lease
            finally:
                with self._guard:
                    self._held.pop(key, None)

    def lock_ahead(self, table_id: str, *, ttl_s: float = 30.0) -> None:
        """Send the acquire of the next ``lock`` of ``table_id`` now (``Coordinator.lock_ahead``):
        the caller's work until that ``lock`` overlaps the acquire's round trip to
        timeline-lock. Never raises (without it, ``lock`` sends its acquire itself)."""
        self.drop_lock_ahead(table_id)
        try:
            pending = self.client.send_acquire(table_id, ttl_s=ttl_s)
        except Exception as err:  # a hint: the lock section sends its own acquire
            log.warning("acquire not sent ahead: %s", err, extra={"table": table_id})
            return
        with self._guard:
            self._ahead[table_id] = pending

    def drop_lock_ahead(self, table_id: str) -> None:
        """Withdraw the acquire of ``table_id`` sent ahead that no ``lock`` took up."""
        with self._guard:
            ahead = self._ahead.pop(table_id, None)
        if ahead is not None:
            self.client.withdraw(ahead)

    def liveness(self, table_id: str, instant: str) -> Liveness:
        """ALIVE when this process beats for the instant and its heartbeat is healthy, else
        heartbeat-monitor's verdict; UNKNOWN when that cannot be read."""
        beating = self.heartbeats.get(table_id, instant)
        if beating is not None and beating.is_healthy():
            return Liveness.ALIVE
        try:
            return self.liveness_view.status(table_id, instant)
        except (LivenessUnavailableError, ConfigurationError) as err:
            log.warning("liveness unknown: %s", err, extra={"table": table_id, "instant": instant})
            return Liveness.UNKNOWN

    def executor_of(self, table_id: str, instant: str) -> str | None:
        """This process's heartbeat owner for the instant, else the monitor's record's owner
        (None when neither is known or the view cannot be read)."""
        beating = self.heartbeats.get(table_id, instant)
        if beating is not None:
            return beating.owner
        try:
            record = self.liveness_view.record(table_id, instant, fresh=False)
        except (LivenessUnavailableError, ConfigurationError):
            return None
        return None if record is None else record.owner

    def monitors_liveness(self) -> bool:
        """heartbeat-monitor judges every process's executors."""
        return True

    def never_heard_of(self, table_id: str, instant: str) -> bool:
        """True when this process does not beat for the instant and heartbeat-monitor's
        changelog, read to its end, has no record of it; False when either knows it or the
        changelog cannot be read."""
        if self.heartbeats.get(table_id, instant) is not None:
            return False
        try:
            return self.liveness_view.record(table_id, instant) is None
        except (LivenessUnavailableError, ConfigurationError) as err:
            log.warning("liveness unknown: %s", err, extra={"table": table_id, "instant": instant})
            return False

    def heartbeat_tolerance_s(self, table_id: str) -> float:
        """The table's heartbeat policy's tolerance (what heartbeat-monitor judges it by)."""
        return self.settings.heartbeat.policy_for(table_id).tolerance_s

    @contextmanager
    def heartbeat(self, table_id: str, instant: str, owner: str) -> Iterator[None]:
        """Publish heartbeats for ``instant`` while the block runs.

        Raises:
            HeartbeatLostError: the first beat was not acknowledged (broker unreachable).
        """
        with self.heartbeats.hold(table_id, instant, owner):
            yield

    def register_table(self, table_id: str, uri: str) -> None:
        """Remember the table's URI for its registration with the cleaner (no IO)."""
        self.registration.locate(table_id, uri)

    def before_requested(self, table_id: str, actor: str) -> None:
        """Register the table with the cleaner before this process's first ``requested``
        entry of it (best effort; see ``CleanerRegistration.before_first_entry``)."""
        self.registration.before_first_entry(table_id, actor)

    def announce(self, table_id: str, entry: TimelineEntry) -> None:
        """Publish ``entry`` on the timeline topic (best effort; see ``TimelinePublisher``);
        the table's first announced entry also registers it with the cleaner (best effort;
        see ``CleanerRegistration``), unless the announcement itself failed (the registration
        would only wait for the same unreachable broker; the next entry registers it)."""
        failed = self.timeline_events.failed
        self.timeline_events.publish(table_id, entry)
        if self.timeline_events.failed == failed:  # else the broker is away: not another wait
            self.registration.announced(table_id, entry)

    def check_heartbeat(self, table_id: str, instant: str) -> None:
        """Raises: HeartbeatLostError when this process's heartbeat of the instant is lost."""
        self.heartbeats.check(table_id, instant)

    def connect(self, *, writes: bool = True) -> None:
        """Connect the lock client and the timeline announcer now, and with ``writes`` the
        heartbeat producer and the cleaner registration, rather than at their first use: a
        long-running service (the cleaner, which neither beats nor registers) pays for the
        connections at start, not in its first table's clean, and a streaming query's
        process before its first batch with rows, not in it. Never raises: what did not
        connect connects at first use (and raises there)."""
        try:
            self.client.connect()
        except LakewardenError as err:
            log.warning("lock client not connected yet: %s", err)
        self.timeline_events.connect()
        if writes:
            self.heartbeats.connect()
            self.registration.connect()

    def close(self) -> None:
        """Close what this coordinator created (the lock client releases held leases)."""
        with self._guard:
            ahead, self._ahead = list(self._ahead.values()), {}
        for pending in ahead:
            self.client.withdraw(pending)
        if self._owns_client:
            self.client.close()
        if self._owns_heartbeats:
            self.heartbeats.close()
        if self._owns_view:
            self.liveness_view.close()
        if self._owns_timeline_events:
            self.timeline_events.close()
        if self._owns_registration:
            self.registration.close()
        if self._job_commits is not None:
            self._job_commits.close()
