"""LockClient's readers without a broker: a caller that waits reads its own reply on its own
thread (no hand-off); a caller that finds a reader is completed by it, and is handed the
reading when the reader's own reply came first; a wait that runs out raises TimeoutError."""

from __future__ import annotations

import queue
import threading
from typing import Any

import pytest

from lakewarden.clients._lock_io import LockIO, LockLease, Pending
from lakewarden.events import default_codec, encode, make_event
from lakewarden.testing import ManualClock, wait_until

T = 1_000.0


class FakeProducer:
    def produce(self, topic: str, value: bytes, **kwargs: Any) -> None:
        pass

    def poll(self, timeout: float) -> int:
        return 0


class FakeMessage:
    def __init__(self, request_id: str, value: bytes) -> None:
        self.request_id, self._value = request_id, value

    def key(self) -> bytes:
        return b"me"

    def value(self) -> bytes:
        return self._value

    def error(self) -> None:
        return None


class FakeConsumer:
    """Replies fed by the test; records which thread read each one."""

    def __init__(self) -> None:
        self.replies: queue.Queue[FakeMessage] = queue.Queue()
        self.read_by: dict[str, int] = {}  # request id -> thread ident that read it

    def poll_message(self, timeout_s: float) -> FakeMessage | None:
        try:
            msg = self.replies.get(timeout=timeout_s) if timeout_s else self.replies.get_nowait()
        except queue.Empty:
            return None
        self.read_by[msg.request_id] = threading.get_ident()
        return msg

    def grant(self, request_id: str, token: int) -> None:
        record = make_event(
            "LockReply",
            table_id="t",
            producer_id="timeline-lock",
            request_id=request_id,
            owner="host:1",
            status="granted",
            token=token,
            lease_expires_ms=1,
        )
        self.replies.put(FakeMessage(request_id, encode("LockReply", record)))


@pytest.fixture
def consumer() -> FakeConsumer:
    return FakeConsumer()


@pytest.fixture
def io(consumer: FakeConsumer) -> LockIO:
    return LockIO(
        producer=FakeProducer(),  # type: ignore[arg-type]
        consumer=consumer,  # type: ignore[arg-type]
        codec=default_codec(),
        requests_topic="lakewarden.lock.requests",
        request_partitions=6,
        reply_topic="lakewarden.lock.replies",
        reply_partition=2,
        client_id="me",
        owner="host:1",
        resend_s=1.0,
        clock=ManualClock(start=T),
    )  # the IO thread is not started: callers are the only readers


def acquire(io: LockIO, request_id: str) -> Pending:
    pending = Pending("acquire", "t", request_id, 3_000, T)
    io.send(pending)
    return pending


class Waiter(threading.Thread):
    """``io.wait(pending)`` on a thread of its own."""

    def __init__(self, io: LockIO, pending: Pending) -> None:
        super().__init__(daemon=True)
        self.io, self.pending = io, pending
        self.result: Any = None

    def run(self) -> None:
        self.result = self.io.wait(self.pending, 30)


def reader_and_follower(io: LockIO) -> tuple[Waiter, Waiter]:
    """Two waiting callers: "a" reads the reply topic, "b" follows it (waits to be handed it)."""
    leader = Waiter(io, acquire(io, "a"))
    leader.start()
    wait_until(lambda: io._reader_busy, what="the first caller reads")  # noqa: SLF001
    follower = Waiter(io, acquire(io, "b"))
    follower.start()
    wait_until(lambda: io._followers, what="the second caller follows")  # noqa: SLF001
    return leader, follower


def test_a_waiting_caller_reads_its_own_reply_on_its_own_thread(
    io: LockIO, consumer: FakeConsumer
) -> None:
    pending = acquire(io, "a")
    consumer.grant("a", 7)
    lease = io.wait(pending, 5)
    assert isinstance(lease, LockLease) and lease.token == 7
    assert consumer.read_by == {"a": threading.get_ident()}


def test_a_follower_is_handed_the_reading_when_the_readers_reply_came_first(
    io: LockIO, consumer: FakeConsumer
) -> None:
    leader, follower = reader_and_follower(io)
    consumer.grant("a", 1)
    leader.join(10)
    assert leader.result.token == 1 and consumer.read_by["a"] == leader.ident
    consumer.grant("b", 2)  # nobody else reads: the follower must have taken over
    follower.join(10)
    assert follower.result.token == 2 and consumer.read_by["b"] == follower.ident


def test_the_reader_completes_a_followers_reply_that_comes_first(
    io: LockIO, consumer: FakeConsumer
) -> None:
    leader, follower = reader_and_follower(io)
    consumer.grant("b", 2)
    follower.join(10)
    assert follower.result.token == 2 and consumer.read_by["b"] == leader.ident
    consumer.grant("a", 3)
    leader.join(10)
    assert leader.result.token == 3 and not io._followers  # noqa: SLF001


def test_a_wait_without_a_reply_times_out_and_leaves_nobody_reading(io: LockIO) -> None:
    pending = acquire(io, "a")
    with pytest.raises(TimeoutError):
        io.wait(pending, 0.05)
    assert not io._reader_busy and not io._followers  # noqa: SLF001
