"""What a streaming query keeps between its micro-batches, in each Python process serving it.

Spark calls the stream writer once per micro-batch, and in other processes than the user's
driver program: every task attempt in an executor's Python worker, every batch commit in a
commit-runner worker on the driver, each built afresh from the pickled writer (strings only).
Both kinds of worker are reused by PySpark across batches, so what a batch opens can be kept
for the next one in the process that opened it, instead of being rebuilt per batch:

- the table (storage, config, and the ``Timeline``, whose cached state makes the next load
  read only the entries appended since), in task and commit workers alike;
- the job-committer client (its producer and its consumer, assigned at the results topic's
  end), in the commit worker only: it is created by ``commit_client()``, which only the
  driver's ``commit`` calls, so no executor ever opens one. ``foreachBatch`` on the driver
  (``_micro_batch``) connects it while the query's first write runs (``connect_ahead``).

The coordinator (lock, heartbeats) is the process's shared connection already
(``lakewarden.api.connection.shared_connection``).

Sessions are keyed by (table URI, settings, streaming query id): two queries into one table,
or one query into two tables, never share one. Nothing tells a worker that a query stopped,
so a session unused for ``IDLE_CLOSE_S`` is closed (its Kafka clients with it) by a daemon
thread, and whatever is open is closed at interpreter exit. (PySpark's daemon ends its
workers with ``os._exit``, which runs no exit handler: such a worker's client dies with it,
which loses nothing, as every request it sent was flushed and answered before ``commit``
returned, and its consumer belongs to no consumer group.) The driver that stopped its own
query closes that query's sessions at once (``close_query_sessions``, from
``IngestJob.stop``). A query that resumes after a longer pause opens a new session; a closed
session is never handed out, nor closed while in use.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lakewarden.clients import CommitClient
from lakewarden.spark._options import load_settings

if TYPE_CHECKING:
    from lakewarden.spark._job import TableHandle

log = logging.getLogger("lakewarden.spark")

IDLE_CLOSE_S = 300.0

SessionKey = tuple[str, str | None, str]  # (table URI, settings JSON, streaming query id)


@dataclass(eq=False)
class StreamSession:
    """One query's table (and, on the driver, its commit client) in this process."""

    key: SessionKey
    table: TableHandle
    last_used: float
    busy: int = 0  # calls using it right now: never closed under them
    _client: CommitClient | None = field(default=None, repr=False)
    _connecting: threading.Thread | None = field(default=None, repr=False)
    _closed: bool = field(default=False, repr=False)

    def commit_client(self) -> CommitClient:
        """The job-committer client of this query (made on first use; driver only)."""
        if self._client is None:
            from lakewarden.spark._job import actor

            self._client = CommitClient(load_settings(self.key[1]), producer_id=actor())
        return self._client

    def connect_ahead(self) -> None:
        """Connect the commit client in a background thread, once per session: the first
        micro-batch's write runs meanwhile, and its commit then waits for no client start
        (``CommitClient.connect``). A failure is logged; the commit connects again and
        raises it there."""
        if self._connecting is not None:
            return
        client = self.commit_client()

        def connect() -> None:
            try:
                client.connect()
            except Exception as err:  # noqa: BLE001 - the commit connects and raises itself
                log.warning("commit client not connected ahead: %s", err)

        self._connecting = threading.Thread(target=connect, name="lw-commit-connect", daemon=True)
        self._connecting.start()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the commit client; the table has nothing to close (its coordinator is the
        process's shared one)."""
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            client.close()


class StreamSessions:
    """The process's sessions by key, closed after ``idle_s`` without use."""

    def __init__(
        self,
        opener: Callable[[str, str | None], TableHandle],
        *,
        idle_s: float = IDLE_CLOSE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._opener = opener
        self._idle_s = idle_s
        self._clock = clock
        self._guard = threading.Lock()
        self._sessions: dict[SessionKey, StreamSession] = {}
        self._reaper: threading.Thread | None = None

    @contextmanager
    def use(self, uri: str, settings_json: str | None, query_id: str) -> Iterator[StreamSession]:
        """The open session of (``uri``, ``settings_json``, ``query_id``), opened if there is
        none, for the duration of the block (it is not closed as idle meanwhile).

        Raises: NotATableError, InvalidOptionError (opening the table)."""
        key = (uri, settings_json, query_id)
        with self._guard:
            session = self._sessions.get(key)
            if session is None or session.closed:
                session = StreamSession(key, self._opener(uri, settings_json), self._clock())
                self._sessions[key] = session
            session.busy += 1
        try:
            yield session
        finally:
            with self._guard:
                session.busy -= 1
                session.last_used = self._clock()

    def close_idle(self) -> list[SessionKey]:
        """Close and forget the sessions unused for ``idle_s``; return their keys."""
        now = self._clock()
        return self._close_unused(lambda s: now - s.last_used >= self._idle_s)

    def close_query(self, query_id: str) -> list[SessionKey]:
        """Close and forget the sessions of streaming query ``query_id`` that no call is using
        (its owner stopped the query); return their keys."""
        return self._close_unused(lambda s: s.key[2] == query_id)

    def _close_unused(self, chosen: Callable[[StreamSession], bool]) -> list[SessionKey]:
        with self._guard:
            done = [s for s in self._sessions.values() if not s.busy and chosen(s)]
            for session in done:
                del self._sessions[session.key]
        for session in done:
            _close(session)
        return [session.key for session in done]

    def close_all(self) -> None:
        with self._guard:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for session in sessions:
            _close(session)

    def start_reaper(self) -> None:
        """Start the daemon thread that closes idle sessions (once; idempotent)."""
        with self._guard:
            if self._reaper is not None:
                return
            self._reaper = threading.Thread(
                target=self._reap, name="lw-stream-sessions", daemon=True
            )
        self._reaper.start()

    def _reap(self) -> None:
        while True:
            time.sleep(max(self._idle_s / 4, 1.0))
            self.close_idle()


def _close(session: StreamSession) -> None:
    try:
        session.close()
    except Exception:  # noqa: BLE001 - closing one session must not stop closing the others
        log.exception("closing the stream session of query %s", session.key[2])


_process_sessions: StreamSessions | None = None
_process_guard = threading.Lock()


def stream_session(
    uri: str, settings_json: str | None, query_id: str
) -> AbstractContextManager[StreamSession]:
    """``with stream_session(uri, settings_json, query_id) as session:`` this process's
    session for the query (see the module docstring).

    Raises: NotATableError, InvalidOptionError."""
    global _process_sessions
    with _process_guard:
        if _process_sessions is None:
            from lakewarden.spark._job import TableHandle

            _process_sessions = StreamSessions(TableHandle.open)
            _process_sessions.start_reaper()
            atexit.register(_process_sessions.close_all)
        sessions = _process_sessions
    return sessions.use(uri, settings_json, query_id)


def close_query_sessions(query_id: str) -> None:
    """Close this process's sessions of streaming query ``query_id`` now, with their Kafka
    clients, instead of after ``IDLE_CLOSE_S``: for the owner of a query it has stopped (a
    client left open would keep reconnecting to a broker that may be stopping too)."""
    with _process_guard:
        sessions = _process_sessions
    if sessions is not None:
        sessions.close_query(query_id)
