"""What a streaming query keeps between micro-batches (``_stream_session``), without Spark:
one session per (table, settings, query), kept while used, closed once idle."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import lakewarden
from lakewarden.spark._messages import SkippedBatchMessage
from lakewarden.spark._stream_session import StreamSessions
from lakewarden.spark._transaction import BatchKey
from lakewarden.testing import ManualClock


class FakeClient:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


def _sessions(clock: ManualClock, opened: list[tuple[str, str | None]]) -> StreamSessions:
    def opener(uri: str, settings_json: str | None) -> Any:
        opened.append((uri, settings_json))
        return object()  # stands in for a TableHandle: the sessions never look inside

    return StreamSessions(opener, idle_s=60.0, clock=clock.monotonic)


def test_one_session_per_table_settings_and_query() -> None:
    opened: list[tuple[str, str | None]] = []
    sessions = _sessions(ManualClock(), opened)
    with sessions.use("/t", None, "q1") as first:
        pass
    with sessions.use("/t", None, "q1") as again:
        assert again is first and again.table is first.table
    with sessions.use("/t", None, "q2") as other_query:
        assert other_query is not first
    with sessions.use("/t", '{"kafka": {}}', "q1") as other_settings:
        assert other_settings is not first
    with sessions.use("/u", None, "q1") as other_table:
        assert other_table is not first
    assert opened == [("/t", None), ("/t", None), ("/t", '{"kafka": {}}'), ("/u", None)]


def test_an_idle_session_is_closed_with_its_client_and_a_new_one_opened() -> None:
    clock, opened = ManualClock(), []
    sessions = _sessions(clock, opened)
    with sessions.use("/t", None, "q") as session:
        client = FakeClient()
        session._client = client  # type: ignore[assignment]  # what commit_client() keeps
    clock.advance(59.0)
    assert sessions.close_idle() == []
    with sessions.use("/t", None, "q") as same:
        assert same is session  # used again: its idle time starts over
    clock.advance(59.0)
    assert sessions.close_idle() == []
    clock.advance(1.0)
    assert sessions.close_idle() == [("/t", None, "q")]
    assert client.closed == 1 and session.closed
    with sessions.use("/t", None, "q") as fresh:
        assert fresh is not session and not fresh.closed
    assert len(opened) == 2


def test_a_session_in_use_is_never_closed_as_idle() -> None:
    clock = ManualClock()
    sessions = _sessions(clock, [])
    with sessions.use("/t", None, "q") as session:
        clock.advance(3600.0)  # a commit that waits long
        assert sessions.close_idle() == []
        assert not session.closed
    clock.advance(60.0)
    assert sessions.close_idle() == [("/t", None, "q")]


def test_close_all_closes_every_client_even_when_one_fails() -> None:
    sessions = _sessions(ManualClock(), [])

    class Broken(FakeClient):
        def close(self) -> None:
            raise RuntimeError("broker gone")

    good = FakeClient()
    with sessions.use("/a", None, "q") as a, sessions.use("/b", None, "q") as b:
        a._client = Broken()  # type: ignore[assignment]
        b._client = good  # type: ignore[assignment]
    sessions.close_all()
    assert good.closed == 1 and a.closed and b.closed


def test_opening_the_table_fails_cleanly_and_is_retried_next_time() -> None:
    calls = []

    def opener(uri: str, settings_json: str | None) -> Any:
        calls.append(uri)
        if len(calls) == 1:
            raise FileNotFoundError(uri)
        return object()

    sessions = StreamSessions(opener, idle_s=60.0, clock=ManualClock().monotonic)
    with pytest.raises(FileNotFoundError), sessions.use("/t", None, "q"):
        pass
    with sessions.use("/t", None, "q") as session:
        assert not session.closed
    assert calls == ["/t", "/t"]


def test_concurrent_users_share_one_session() -> None:
    opened: list[tuple[str, str | None]] = []
    sessions = _sessions(ManualClock(), opened)
    seen: list[object] = []
    barrier = threading.Barrier(4)

    def use() -> None:
        barrier.wait()
        with sessions.use("/t", None, "q") as session:
            seen.append(session)

    threads = [threading.Thread(target=use) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(opened) == 1 and len({id(s) for s in seen}) == 1


def test_micro_batches_of_one_query_commit_through_one_kept_table(tmp_path: Path) -> None:
    """The stream writer's task and commit steps (without Spark): two batches of a query
    commit once each through the session's table; a rerun of a committed batch is skipped."""
    from _spark_helpers import make_table, rows

    from lakewarden.spark import _stream_session
    from lakewarden.spark._messages import SkippedBatchMessage
    from lakewarden.spark._stream import LakewardenStreamWriter
    from lakewarden.spark._task import TaskIdentity, write_task
    from lakewarden.spark._transaction import BatchKey
    from lakewarden.table.instant import Transition

    table = make_table(tmp_path)
    uri, query = str(tmp_path), f"query-{tmp_path.name}"
    writer = LakewardenStreamWriter(uri, None, checkpoint="/checkpoint")
    handles = []
    for batch in (0, 1):
        key = BatchKey(query, "run-1", batch, "/checkpoint")
        with _stream_session.stream_session(uri, None, query) as session:
            handles.append(session.table)
            spec = writer._open_batch_of(session.table, key)
        assert not isinstance(spec, SkippedBatchMessage)
        data = rows(range(batch * 10, batch * 10 + 10)).to_batches()
        message = dataclasses.replace(
            write_task(spec, TaskIdentity(0, 0, 1), iter(data)), batch=key
        )
        writer.commit([message], batch)
    assert handles[0] is handles[1]  # the table (and its timeline cache) was kept
    rerun = BatchKey(query, "run-2", 1, "/checkpoint")
    with _stream_session.stream_session(uri, None, query) as session:
        assert isinstance(writer._open_batch_of(session.table, rerun), SkippedBatchMessage)
    assert [i.state for i in table.timeline()] == [Transition.COMPLETED] * 2
    assert lakewarden.read(uri).num_rows == 20


class ConnectingClient(FakeClient):
    def __init__(self, fails: bool = False) -> None:
        super().__init__()
        self.connects = 0
        self.fails = fails

    def connect(self) -> None:
        self.connects += 1
        if self.fails:
            raise RuntimeError("broker away")


@pytest.mark.parametrize("fails", [False, True])
def test_the_commit_client_is_connected_ahead_once_per_session(fails: bool) -> None:
    """The first micro-batch's write runs while the client connects; later batches do not
    connect again, and a failure is left for the commit to meet (not raised here)."""
    sessions = _sessions(ManualClock(), [])
    client = ConnectingClient(fails)
    with sessions.use("/t", None, "q") as session:
        session._client = client  # type: ignore[assignment]  # what commit_client() keeps
        session.connect_ahead()
        session.connect_ahead()
        assert session._connecting is not None
        session._connecting.join(timeout=10)
    assert client.connects == 1


def test_a_stopped_query_s_sessions_are_closed_at_once_and_no_others() -> None:
    """The owner of a stopped query closes its sessions without waiting for the idle time:
    their commit clients would otherwise keep reconnecting to a broker that may be gone."""
    sessions = _sessions(ManualClock(), [])
    stopped, running = FakeClient(), FakeClient()
    with sessions.use("/t", None, "stopped") as mine, sessions.use("/t", None, "running") as other:
        mine._client = stopped  # type: ignore[assignment]
        other._client = running  # type: ignore[assignment]
    with sessions.use("/u", None, "stopped") as busy:
        assert sessions.close_query("stopped") == [("/t", None, "stopped")]
        assert not busy.closed  # in use by a call: never closed under it
    assert stopped.closed == 1 and mine.closed
    assert running.closed == 0 and not other.closed
    assert sessions.close_query("stopped") == [("/u", None, "stopped")]


def test_a_task_joins_its_batchs_open_instant_without_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first task of a micro-batch opens its instant under the table lock; a task that
    comes after finds it in the timeline and joins it without a lease (the locked path would
    append nothing), so it does not queue behind other writers for the lock."""
    from _spark_helpers import make_table

    from lakewarden.spark import _job, _stream_session
    from lakewarden.spark._stream import LakewardenStreamWriter

    make_table(tmp_path)
    uri, query = str(tmp_path), f"query-{tmp_path.name}"
    writer = LakewardenStreamWriter(uri, None, checkpoint="/checkpoint")
    key = BatchKey(query, "run-1", 0, "/checkpoint")
    with _stream_session.stream_session(uri, None, query) as session:
        table = session.table
        first = writer._open_batch_of(table, key)

        def no_lock(*args: object, **kwargs: object) -> None:
            raise AssertionError("the lock was taken to join an open instant")

        monkeypatch.setattr(table.coordinator, "lock", no_lock)
        monkeypatch.setattr(_job, "open_batch", no_lock)
        second = writer._open_batch_of(table, key)
    assert not isinstance(first, SkippedBatchMessage)
    assert not isinstance(second, SkippedBatchMessage)
    assert (second.instant, second.job_id) == (first.instant, first.job_id)


def _connection(fails: bool = False) -> Any:
    """Stands in for the process's shared connection: its coordinator counts connects."""
    return SimpleNamespace(coordinator=ConnectingClient(fails))


def _join_warm_ups() -> None:
    for thread in threading.enumerate():
        if thread.name == "lw-warm-clients":
            thread.join(timeout=10)


def test_a_commit_without_rows_starts_the_processs_clients_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The format's first trigger has no rows: its commit starts, in the background, the
    Kafka clients that the first commit with rows would otherwise start (a lock, an
    announcement, a heartbeat, a registration); later batches of the process start none."""
    from lakewarden.spark import _stream
    from lakewarden.spark._messages import EmptyTaskMessage

    connection = _connection()
    monkeypatch.setattr(_stream, "shared_connection", lambda settings: connection)
    monkeypatch.setattr(_stream, "_warmed", set())
    writer = _stream.LakewardenStreamWriter("file:///nowhere", None)
    writer.commit([EmptyTaskMessage(), None], 0)
    _join_warm_ups()
    writer.commit([EmptyTaskMessage(), None], 1)
    _join_warm_ups()
    assert connection.coordinator.connects == 1
    _stream.warm_ahead('{"kafka": {}}', announces_manifests=False)  # other settings
    _join_warm_ups()
    assert connection.coordinator.connects == 2


def test_a_commit_without_rows_opens_the_querys_session_ahead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its empty tasks name the batch, so the planner opens the query's session (the table,
    the job-committer client, connected in the background) before the first batch with rows
    commits."""
    from lakewarden.spark import _stream
    from lakewarden.spark._messages import EmptyTaskMessage

    opened: list[tuple[str, str | None, str]] = []
    session = SimpleNamespace(connects_ahead=0)
    session.connect_ahead = lambda: setattr(session, "connects_ahead", session.connects_ahead + 1)

    @contextmanager
    def stream_session(uri: str, settings_json: str | None, query_id: str) -> Iterator[Any]:
        opened.append((uri, settings_json, query_id))
        yield session

    monkeypatch.setattr(_stream, "shared_connection", lambda settings: _connection())
    monkeypatch.setattr(_stream, "_warmed", set())
    monkeypatch.setattr(_stream, "stream_session", stream_session)
    key = BatchKey(query_id="q1", run_id="r1", batch_id=0, checkpoint="/cp")
    writer = _stream.LakewardenStreamWriter("file:///t", None)
    writer.commit([EmptyTaskMessage(batch=key), None], 0)
    _join_warm_ups()
    assert opened == [("file:///t", None, "q1")] and session.connects_ahead == 1


def test_a_task_registers_its_querys_table_before_its_rows_come(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A task process that joins a running query would otherwise pay the cleaner
    registration's first delivery inside its first batch with rows, on the way to the table
    lock; its warm-up registers the table, once per process and query."""
    from lakewarden.spark import _stream

    registered: list[tuple[str, str]] = []
    coordinator = SimpleNamespace(
        connect=lambda: None,
        before_requested=lambda table_id, actor: registered.append((table_id, actor)),
    )
    table = SimpleNamespace(config=SimpleNamespace(table_id="tid-1"), coordinator=coordinator)
    opened: list[tuple[str, str | None, str]] = []

    @contextmanager
    def stream_session(uri: str, settings_json: str | None, query_id: str) -> Iterator[Any]:
        opened.append((uri, settings_json, query_id))
        yield SimpleNamespace(table=table)

    monkeypatch.setattr(_stream, "shared_connection", lambda settings: _connection())
    monkeypatch.setattr(_stream, "connect_announcer", lambda settings: None)
    monkeypatch.setattr(_stream, "stream_session", stream_session)
    monkeypatch.setattr(_stream, "_warmed", set())
    monkeypatch.setattr(_stream, "current_task", lambda: None)
    key = BatchKey(query_id="q1", run_id="r1", batch_id=4, checkpoint="/cp")
    monkeypatch.setattr(_stream, "batch_key", lambda checkpoint: key)
    writer = _stream.LakewardenStreamWriter("file:///t", None)
    writer.write(iter([]))  # a batch without rows for this task: it warms up all the same
    _join_warm_ups()
    writer.write(iter([]))
    _join_warm_ups()
    assert opened == [("file:///t", None, "q1")]
    assert [table_id for table_id, _ in registered] == ["tid-1"]
    _stream.warm_ahead(None, announces_manifests=True, query_table=("file:///t", "q2"))
    _join_warm_ups()
    assert opened[-1] == ("file:///t", None, "q2") and len(registered) == 2


def test_registering_ahead_never_fails_a_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    from lakewarden.spark import _stream
    from lakewarden.table.config import NotATableError

    @contextmanager
    def stream_session(uri: str, settings_json: str | None, query_id: str) -> Iterator[Any]:
        raise NotATableError(f"no table at {uri}")
        yield

    monkeypatch.setattr(_stream, "stream_session", stream_session)
    _stream.register_table_ahead("file:///nowhere", None, "q1")  # logged, not raised


def test_warming_the_clients_never_fails_a_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    from lakewarden.spark import _stream

    connection = _connection(fails=True)
    monkeypatch.setattr(_stream, "shared_connection", lambda settings: connection)
    _stream.warm_clients(None, announces_manifests=True)  # logged, not raised
    assert connection.coordinator.connects == 1


def test_the_embedded_coordinator_has_nothing_to_start() -> None:
    from lakewarden.table.coordinator import EmbeddedCoordinator

    before = threading.active_count()
    EmbeddedCoordinator().connect()
    assert threading.active_count() == before
