"""The blocking part of cancel-manager: open the table, apply RFC-79's API, say how it ended.

``CancelWorker.run(command)`` runs on the service loop's thread, one command at a time:

1. find the table: the request's ``table_uri``, else the one the service remembered for the
   table id (``known_uri``: the handler keeps them in the ``tables`` registry, so that a
   later ``HeartbeatExpired`` of that table can be acted on, also after a restart); none, or a
   table whose id is not the event's: ``unknown_table``. Opened tables are kept (per URI):
   their timeline is reloaded incrementally, so a request costs the new entries, not a full
   load of ``table.json`` and the log;
2. ``request``: ``Table.request_cancel`` (accepted, already_requested, already_aborted;
   refused_completed, not_cancellable, unknown_instant); ``execute``:
   ``Table.execute_cancel`` (aborted, already_aborted; refused_executing, not_requested, ...);
3. a retryable failure (lock timeout, a store fault) is tried again, up to ``attempts``
   times, then reported ``failed``;
4. the entries the service appended are returned, to be published as
   ``TimelineTransition`` in order, before the result.

A request for a table the worker has open sends the table lock's acquire ahead
(``lock_ahead``, called by the loop as soon as the message is read, by its key, the table
id): the acquire's round trip to timeline-lock then overlaps decoding, validating and the
worker's own steps up to the command's first lock section, which waits for that acquire's
grant (``Coordinator.lock_ahead``). The transaction is unchanged: the lock is granted before
the timeline is reloaded. ``drop_lock_ahead``, which the handler calls once it is done with
every request, withdraws an acquire that no lock section took up (a request that turned out
malformed or failed before its lock).

A ``request`` holds the table lock a little longer than ``request_cancel`` does: its release
is sent by ``release_held``, which the handler calls once the result is out, so the client's
wait does not include the release (a produce to timeline-lock). Only ``request`` defers it: it
has one lock section, where ``execute_cancel`` must give the lock up while it deletes the
plan's files (RFC-79), and any later acquire of this worker releases what it still holds
first, so it never waits for itself.

``CancelWorker.expired(expiry)``: heartbeat-monitor declared the executor of a plan dead; if
the plan has a cancel request, run ``execute_cancel`` by itself (nobody else may ever come
back for its files).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from lakewarden.errors import LakewardenError, RetryableError
from lakewarden.settings import Settings
from lakewarden.table import NotATableError, Table
from lakewarden.table.cancel import LOCK_TTL_S
from lakewarden.table.coordinator import Coordinator, Lease, Liveness
from lakewarden.table.instant import TABLE_SERVICE_ACTIONS, Transition
from lakewarden.table.timeline import TimelineEntry
from lakewarden.tableservice import (
    CancelNotRequestedError,
    InstantAlreadyCompletedError,
    NotATableServicePlanError,
    PlanNotCancellableError,
    PlanStillExecutingError,
    UnknownPlanError,
)
from lakewarden_services.cancel_manager.protocol import CancelCommand, Expiry, Outcome

__all__ = ["ACTOR_PREFIX", "CancelWorker", "actor"]

log = logging.getLogger(__name__)

ACTOR_PREFIX = "cancel-manager@"
# The named refusals and the status each one answers with.
_REFUSALS: tuple[tuple[type[LakewardenError], str], ...] = (
    (InstantAlreadyCompletedError, "refused_completed"),
    (PlanStillExecutingError, "refused_executing"),
    (PlanNotCancellableError, "not_cancellable"),
    (NotATableServicePlanError, "not_cancellable"),
    (CancelNotRequestedError, "not_requested"),
    (UnknownPlanError, "unknown_instant"),
)


def actor() -> str:
    return f"{ACTOR_PREFIX}{socket.gethostname()}:{os.getpid()}"


class CancelWorker:
    """Applies cancel commands; one per service process, called from one thread at a time
    (the service's single worker thread)."""

    def __init__(
        self,
        settings: Settings,
        coordinator: Callable[[], Coordinator],
        *,
        attempts: int = 3,
        retry_delay_s: float = 0.5,
    ) -> None:
        self.settings = settings
        self.coordinator = coordinator
        self.attempts = attempts
        self.retry_delay_s = retry_delay_s
        self.actor = actor()
        self._recorder: _Recorder | None = None
        self._open_tables: dict[str, Table] = {}
        self._open_ids: dict[str, int] = {}  # table id -> how many open tables have it

    def run(self, command: CancelCommand, *, known_uri: str | None = None) -> Outcome:
        """Steps 1-4 of the module docstring; never raises for a bad request."""
        uri = command.table_uri or known_uri
        if uri is None:
            return Outcome(
                "unknown_table",
                f"cancel-manager does not know where table {command.table_id} is: the request "
                "names no table_uri and none was seen before. Help: send table_uri.",
            )
        recorder = self._fresh_recorder()
        try:
            table = self._open(uri, command.table_id, recorder)  # 1.
        except _UnknownTable as err:
            return Outcome("unknown_table", str(err), error_type=err.error_type)
        recorder.defer_release = command.kind == "request"
        try:
            return self._apply(uri, lambda: _step(table, command), recorder)  # 2., 3., 4.
        finally:
            recorder.defer_release = False

    def lock_ahead(self, table_id: str) -> None:
        """Send the acquire of ``table_id``'s lock now when the table is open already (a
        request for it was just read: see the module doc); never raises."""
        if self._recorder is not None and self._open_ids.get(table_id):
            self._recorder.lock_ahead(table_id, ttl_s=LOCK_TTL_S)

    def drop_lock_ahead(self) -> None:
        """Withdraw an acquire sent ahead that no lock section took up; never raises."""
        if self._recorder is not None:
            self._recorder.drop_lock_ahead()

    def release_held(self) -> None:
        """Release the table lock a ``request`` kept (see the module doc); never raises."""
        if self._recorder is not None:
            self._recorder.release_held()

    def expired(self, expiry: Expiry, *, uri: str | None) -> Outcome | None:
        """``execute_cancel`` of a cancel-requested plan whose executor died, the table being
        at ``uri`` (what the service remembered for it); None when there is nothing to do (not
        a plan, no cancel request, unknown table)."""
        if uri is None:
            log.info(
                "heartbeat expired for a table cancel-manager never saw; ignored",
                extra={"table": expiry.table_id, "instant": expiry.instant},
            )
            return None
        recorder = self._fresh_recorder()
        try:
            table = self._open(uri, expiry.table_id, recorder)
        except _UnknownTable:
            return None
        current = table.state().get(expiry.instant)
        if (
            current is None
            or current.action not in TABLE_SERVICE_ACTIONS
            or current.state is not Transition.CANCEL_REQUESTED
        ):
            return None
        # heartbeat-monitor publishes the expiry, waits for the broker to have it, and only
        # then writes its "dead" record to the liveness changelog (expiries first: see its
        # monitor module), so the liveness view this step consults may still say ALIVE for a
        # moment: wait for it, as for any retryable failure, instead of refusing for good.
        return self._apply(
            uri,
            lambda: _outcome_of(table.execute_cancel(expiry.instant)),
            recorder,
            wait_for_liveness=True,
        )

    def _fresh_recorder(self) -> _Recorder:
        """The one recorder every cached table announces to, emptied for a new command (what
        an earlier command left there failed with it and was not published either)."""
        if self._recorder is None:
            self._recorder = _Recorder(self.coordinator())
        self._recorder.take()
        return self._recorder

    def _open(self, uri: str, table_id: str, recorder: _Recorder) -> Table:
        """The table at ``uri``, opened once and kept (reopened when the kept one is another
        table: the URI was reused).

        Raises: _UnknownTable (not a table, unreadable, or another table than ``table_id``)."""
        table = self._open_tables.get(uri)
        if table is None or table.table_id != table_id:
            try:
                table = Table.open(uri, coordinator=recorder, settings=self.settings)
            except (NotATableError, LakewardenError, ValueError) as err:
                # ValueError: a URI no storage can even try (a NUL byte in a local path).
                self._forget(uri)
                raise _UnknownTable(f"cannot open table {table_id} at {uri}: {err}", err) from err
            table.actor = self.actor
            self._forget(uri)
            self._open_tables[uri] = table
            self._open_ids[table.table_id] = self._open_ids.get(table.table_id, 0) + 1
        if table.table_id != table_id:
            raise _UnknownTable(
                f"{uri} holds table {table.table_id}, not {table_id}: the request names the "
                "wrong table URI; nothing was changed.",
                None,
            )
        return table

    def _forget(self, uri: str) -> None:
        """Drop the table kept for ``uri`` (it is opened afresh next time)."""
        table = self._open_tables.pop(uri, None)
        if table is not None:
            left = self._open_ids.get(table.table_id, 0) - 1
            if left > 0:
                self._open_ids[table.table_id] = left
            else:
                self._open_ids.pop(table.table_id, None)

    def _apply(
        self,
        uri: str,
        step: Callable[[], str],
        recorder: _Recorder,
        *,
        wait_for_liveness: bool = False,
    ) -> Outcome:
        """``step`` with up to ``attempts`` tries on a retryable failure; a live executor
        (``PlanStillExecutingError``) is a refusal at once, unless ``wait_for_liveness`` (the
        caller knows the executor was declared dead and the liveness view is catching up)."""
        for attempt in range(1, self.attempts + 1):
            try:
                status = step()
                return Outcome(status, entries=recorder.take())
            except RetryableError as err:
                still_executing = isinstance(err, PlanStillExecutingError)
                if (still_executing and not wait_for_liveness) or attempt == self.attempts:
                    return _refusal(err, recorder)
                log.warning("cancel step failed (%s); retrying", err)
                time.sleep(self.retry_delay_s * attempt)
            except LakewardenError as err:
                if not _named_refusal(err):
                    # A table that moved, was replaced or is broken: open it afresh next time.
                    self._forget(uri)
                return _refusal(err, recorder)
        raise AssertionError("unreachable")


def _step(table: Table, command: CancelCommand) -> str:
    if command.kind == "request":
        outcome = table.request_cancel(
            command.instant, requested_by=command.requester, reason=command.reason
        )
        return "accepted" if outcome == "requested" else str(outcome)
    return _outcome_of(table.execute_cancel(command.instant))


def _outcome_of(outcome: str) -> str:
    return "aborted" if outcome == "aborted" else "already_aborted"


def _named_refusal(err: LakewardenError) -> bool:
    return any(isinstance(err, kind) for kind, _ in _REFUSALS)


def _refusal(err: LakewardenError, recorder: _Recorder) -> Outcome:
    status = next((s for kind, s in _REFUSALS if isinstance(err, kind)), "failed")
    return Outcome(status, str(err), error_type=type(err).__name__, entries=recorder.take())


class _UnknownTable(Exception):
    def __init__(self, message: str, cause: BaseException | None) -> None:
        super().__init__(message)
        self.error_type = type(cause).__name__ if cause is not None else None


class _Recorder(Coordinator):
    """The service's coordinator, except that appended entries are kept for the handler to
    publish (in order, before the result) instead of being announced one by one, and that
    with ``defer_release`` a lock section's release waits for ``release_held``."""

    def __init__(self, inner: Coordinator) -> None:
        self.inner = inner
        self.defer_release = False
        self._entries: list[TimelineEntry] = []
        self._held: list[AbstractContextManager[Lease]] = []
        self._ahead: str | None = None  # the table whose acquire was sent ahead
        self._guard = threading.Lock()

    def lock(
        self, table_id: str, *, ttl_s: float = 30.0, wait_s: float = 30.0
    ) -> AbstractContextManager[Lease]:
        self.release_held()  # never wait for a lock this worker still holds
        if not self.defer_release:
            return self.inner.lock(table_id, ttl_s=ttl_s, wait_s=wait_s)
        return self._held_until_released(table_id, ttl_s=ttl_s, wait_s=wait_s)

    @contextmanager
    def _held_until_released(
        self, table_id: str, *, ttl_s: float, wait_s: float
    ) -> Iterator[Lease]:
        section = self.inner.lock(table_id, ttl_s=ttl_s, wait_s=wait_s)
        lease = section.__enter__()
        self._held.append(section)  # also when the block raises: released all the same
        yield lease

    def release_held(self) -> None:
        while self._held:
            section = self._held.pop()
            try:
                section.__exit__(None, None, None)
            except Exception:  # a release is best effort: the lease expires by its ttl
                log.exception("releasing a table lock failed")

    def lock_ahead(self, table_id: str, *, ttl_s: float = 30.0) -> None:
        self.drop_lock_ahead()
        self._ahead = table_id
        self.inner.lock_ahead(table_id, ttl_s=ttl_s)

    def drop_lock_ahead(self, table_id: str | None = None) -> None:
        """Withdraw the acquire sent ahead, if a lock section did not take it up (this worker
        sends one at a time: whichever table it was for)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            self.inner.drop_lock_ahead(ahead)

    def liveness(self, table_id: str, instant: str) -> Liveness:
        return self.inner.liveness(table_id, instant)

    def heartbeat(self, table_id: str, instant: str, owner: str) -> AbstractContextManager[None]:
        return self.inner.heartbeat(table_id, instant, owner)

    def executor_of(self, table_id: str, instant: str) -> str | None:
        return self.inner.executor_of(table_id, instant)

    def heartbeat_tolerance_s(self, table_id: str) -> float:
        return self.inner.heartbeat_tolerance_s(table_id)

    def check_heartbeat(self, table_id: str, instant: str) -> None:
        self.inner.check_heartbeat(table_id, instant)

    def announce(self, table_id: str, entry: TimelineEntry) -> None:
        with self._guard:
            self._entries.append(entry)

    def take(self) -> tuple[TimelineEntry, ...]:
        with self._guard:
            taken, self._entries = tuple(self._entries), []
        return taken
