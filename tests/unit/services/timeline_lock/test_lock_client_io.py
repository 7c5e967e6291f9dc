"""LockClient's IO half without a broker: replies by key, grants, queued callbacks, renewals
every ttl/3 from the last confirmed send, resends, and the three ways a lease is lost."""

from __future__ import annotations

from typing import Any

import pytest

from lakewarden.clients import table_partition
from lakewarden.clients._lock_io import LockIO, LockLease, Pending
from lakewarden.events import decode, default_codec, encode, make_event
from lakewarden.testing import ManualClock


class FakeProducer:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def produce(self, topic: str, value: bytes, **kwargs: Any) -> None:
        record = decode(value).record
        record["_partition"] = kwargs["partition"]
        record["_key"] = kwargs["key"]
        self.sent.append(record)

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0


class FakeMessage:
    def __init__(self, key: bytes | None, value: bytes) -> None:
        self._key, self._value = key, value

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes:
        return self._value

    def error(self) -> None:
        return None


# The times the tests pass are offsets from T, where each test's ManualClock stands (and stays:
# a lease's ``lost`` reads that clock, so a slow machine cannot age a lease during a test).
T = 1_000.0


@pytest.fixture
def io() -> LockIO:
    return LockIO(
        producer=FakeProducer(),  # type: ignore[arg-type]
        consumer=None,  # type: ignore[arg-type]  # the thread is not started
        codec=default_codec(),
        requests_topic="lakewarden.lock.requests",
        request_partitions=6,
        reply_topic="lakewarden.lock.replies",
        reply_partition=2,
        client_id="me",
        owner="host:1",
        resend_s=1.0,
        clock=ManualClock(start=T),
    )


def sent(io: LockIO) -> list[dict[str, Any]]:
    return io.producer.sent  # type: ignore[attr-defined,no-any-return]


def reply(io: LockIO, request_id: str, status: str, *, key: bytes = b"me", **fields: Any) -> None:
    record = make_event(
        "LockReply",
        table_id="t",
        producer_id="timeline-lock",
        request_id=request_id,
        owner="host:1",
        status=status,
        **fields,
    )
    io._on_message(FakeMessage(key, encode("LockReply", record)))  # type: ignore[arg-type]  # noqa: SLF001


def acquire(io: LockIO, *, at: float | None = None, ttl_ms: int = 3_000, **kw: Any) -> Pending:
    at = T if at is None else at
    pending = Pending("acquire", "t", f"acq{len(sent(io))}", ttl_ms, at, **kw)
    io.send(pending)
    return pending


def test_requests_are_routed_to_the_tables_partition_with_this_clients_reply_route(
    io: LockIO,
) -> None:
    acquire(io)
    [record] = sent(io)
    assert record["_partition"] == table_partition("t", 6) and record["_key"] == b"t"
    assert record["reply_partition"] == 2 and record["reply_key"] == "me"
    assert record["reply_topic"] == "lakewarden.lock.replies" and record["kind"] == "acquire"
    io.send_untracked("release", "t", token=4)
    assert sent(io)[-1]["reply_topic"] == "" and sent(io)[-1]["reply_key"] is None


def test_a_grant_makes_a_lease_counted_from_the_first_send(io: LockIO) -> None:
    queued: list[int] = []
    pending = acquire(io, at=T, on_queued=queued.append)
    reply(io, pending.request_id, "queued", key=b"someone-else", queue_position=9)
    assert queued == []  # not our key: not even decoded
    reply(io, pending.request_id, "queued", queue_position=2)
    reply(io, pending.request_id, "queued", queue_position=1)
    assert queued == [2]  # once
    reply(io, pending.request_id, "granted", token=7, lease_expires_ms=1)
    lease = pending.future.result(0)
    assert isinstance(lease, LockLease) and lease.token == 7
    assert lease.expires_at == pytest.approx(T + 3.0) and lease.confirmed_at == T
    assert io.leases[pending.request_id] is lease and pending.request_id not in io.pending


def test_refusals_complete_the_future_with_the_reply(io: LockIO) -> None:
    pending = acquire(io)
    reply(io, pending.request_id, "refused", reason="nope")
    assert pending.future.result(0)["reason"] == "nope"


def grant(io: LockIO, *, at: float | None = None, ttl_ms: int = 3_000) -> LockLease:
    pending = acquire(io, at=at, ttl_ms=ttl_ms)
    reply(io, pending.request_id, "granted", token=5)
    lease = pending.future.result(0)
    assert isinstance(lease, LockLease)
    return lease


def test_renewals_every_third_of_the_ttl_move_the_deadline_on_confirmation(io: LockIO) -> None:
    lease = grant(io)
    io._tick(T + 0.9)  # noqa: SLF001
    assert [r["kind"] for r in sent(io)] == ["acquire"]
    io._tick(T + 1.0)  # noqa: SLF001  ttl/3 after the confirmed send
    renewal = sent(io)[-1]
    assert renewal["kind"] == "renew" and renewal["token"] == 5 and renewal["ttl_ms"] == 3_000
    io._tick(T + 1.5)  # noqa: SLF001  in flight: not sent again before resend_s
    assert len(sent(io)) == 2
    reply(io, renewal["request_id"], "granted", token=5)
    assert lease.confirmed_at == T + 1.0 and lease.expires_at == pytest.approx(T + 4.0)


def test_a_lease_unconfirmed_for_a_ttl_is_lost_and_no_longer_renewed(io: LockIO) -> None:
    lease = grant(io, at=T - 10.0)  # granted 10 s ago, never renewed: lost by the clock
    assert lease.lost and lease.lost_reason is None
    io._tick(T)  # noqa: SLF001
    assert lease.request_id not in io.leases  # no renewals for a lost lease


def test_resend_of_unanswered_renewals(io: LockIO) -> None:
    grant(io)
    io._tick(T + 1.0)  # noqa: SLF001
    io._tick(T + 2.0)  # noqa: SLF001  resend_s passed without an answer
    assert [r["kind"] for r in sent(io)] == ["acquire", "renew", "renew"]


def test_a_refused_renewal_loses_the_lease_at_once(io: LockIO) -> None:
    lease = grant(io)
    io._tick(T + 1.0)  # noqa: SLF001
    reply(io, sent(io)[-1]["request_id"], "refused", reason="stale token 5")
    assert lease.lost and lease.lost_reason == "stale token 5"


def test_an_expiry_notice_loses_the_lease(io: LockIO) -> None:
    lease = grant(io)
    reply(io, lease.request_id, "expired", token=5, reason="not renewed")
    assert lease.lost and lease.lost_reason == "not renewed"


def test_an_unanswered_acquire_is_resent_as_the_same_request(io: LockIO) -> None:
    pending = acquire(io, at=T)
    io._tick(T + 0.5)  # noqa: SLF001
    assert len(sent(io)) == 1
    io._tick(T + 1.0)  # noqa: SLF001
    assert [r["request_id"] for r in sent(io)] == [pending.request_id] * 2
    reply(io, pending.request_id, "queued", queue_position=1)
    io._tick(T + 2.5)  # noqa: SLF001  queued: resent three times less often
    assert len(sent(io)) == 2
    io._tick(T + 4.0)  # noqa: SLF001
    assert len(sent(io)) == 3


def test_forget_drops_a_pending_acquire_and_a_lease_granted_meanwhile(io: LockIO) -> None:
    pending = acquire(io)
    reply(io, pending.request_id, "granted", token=1)
    assert io.forget(pending.request_id) is not None and not io.leases
    reply(io, pending.request_id, "granted", token=1)  # a late duplicate: ignored
    assert not io.leases


def test_a_lease_is_lost_exactly_a_ttl_after_its_last_confirmed_send(io: LockIO) -> None:
    clock = io.clock
    assert isinstance(clock, ManualClock)
    lease = grant(io, at=T)  # ttl 3 s
    clock.advance(2.999)
    assert not lease.lost
    clock.advance(0.001)
    assert lease.lost and lease.lost_reason is None  # by the clock, no notice needed
