"""Re-driving timeline-lock's state module over recorded lock requests: the recorded replies
of a real sequence (grant, queue, renewal, expiry handing the lock on, release, an invalid
request) are reproduced; an altered or missing reply is named; lost requests are said."""

from __future__ import annotations

from typing import Any

from _events import T0, TABLE

from lakewarden.events import default_codec, make_event
from lakewarden.history import Recorded, RetentionGap
from lakewarden.history.lock_replay import redrive_locks
from lakewarden.settings import Settings

SETTINGS = Settings()
REQUESTS = "lakewarden.lock.requests"
REPLIES = "lakewarden.lock.replies"


def _recorded(name: str, topic: str, offset: int, at: int, **fields: Any) -> Recorded:
    record = make_event(name, table_id=TABLE, producer_id="test", **fields)
    decoded = default_codec().decode(default_codec().encode(name, record))
    return Recorded(decoded.name, decoded.record, topic, 0, offset, T0 + at)


def _request(offset: int, at: int, request_id: str, kind: str, **fields: Any) -> Recorded:
    wanted: dict[str, Any] = {
        "owner": "w1",
        "ttl_ms": 1000,
        "reply_topic": REPLIES,
        "reply_partition": 0,
        "reply_key": "client",
    }
    return _recorded(
        "LockRequest", REQUESTS, offset, at, request_id=request_id, kind=kind, **(wanted | fields)
    )


def _reply(offset: int, request_id: str, status: str, **fields: Any) -> Recorded:
    owner = fields.pop("owner", "w1")
    return _recorded(
        "LockReply", REPLIES, offset, 0, request_id=request_id, owner=owner, status=status, **fields
    )


def _requests() -> list[Recorded]:
    return [
        _request(0, 0, "r1", "acquire"),
        _request(1, 10, "r2", "acquire", owner="w2"),
        _request(2, 500, "r3", "renew", token=1),
        # The timer saw the renewed lease (its deadline set by the service clock) run out.
        _request(
            3,
            1600,
            "r4",
            "expire",
            owner="timeline-lock",
            ttl_ms=0,
            reply_topic="",
            reply_partition=None,
            reply_key=None,
            token=1,
            lease_expires_ms=T0 + 1510,
        ),
        _request(4, 1700, "r5", "release", owner="w2", token=2),
        _request(5, 1800, "r6", "acquire", owner="w3", ttl_ms=0),  # invalid: dead-lettered
    ]


def _replies(**changed: Recorded | None) -> list[Recorded]:
    replies = {
        "r1": _reply(0, "r1", "granted", token=1, lease_expires_ms=T0 + 1003),
        "r2": _reply(1, "r2", "queued", owner="w2", queue_position=1),
        "r3": _reply(2, "r3", "granted", token=1, lease_expires_ms=T0 + 1510),
        "r1-expired": _reply(3, "r1", "expired", token=1, lease_expires_ms=T0 + 1510),
        "r2-granted": _reply(4, "r2", "granted", owner="w2", token=2, lease_expires_ms=T0 + 2600),
        "r5": _reply(5, "r5", "granted", owner="w2", token=2),
        "r6": _reply(6, "r6", "refused", owner="w3", reason="acquire needs ttl_ms > 0, got 0"),
    }
    replies.update(changed)
    return [r for r in replies.values() if r is not None]


def test_the_recorded_decisions_are_those_of_the_state_module() -> None:
    report = redrive_locks(SETTINGS, TABLE, [*_replies(), *_requests()])

    assert (report.requests, report.replies, report.skipped) == (6, 7, None)
    assert report.differences == ()
    assert report.clean


def test_the_expiry_is_judged_on_the_deadline_the_service_recorded_not_the_broker_clock() -> None:
    # Renewed at broker time 500 with ttl 1000: 1500 by the broker clock, but the service
    # recorded 1510, and the timer's expire names 1510. With 1500 the expire would be a no-op.
    report = redrive_locks(SETTINGS, TABLE, [*_requests(), *_replies()])
    assert report.clean


def test_an_altered_reply_and_a_missing_one_are_named() -> None:
    altered = _reply(4, "r2", "granted", owner="w2", token=3, lease_expires_ms=T0 + 2600)
    report = redrive_locks(
        SETTINGS, TABLE, [*_requests(), *_replies(**{"r2-granted": altered, "r5": None})]
    )

    described = [d.describe() for d in report.differences]
    assert described == [
        "lock request r2 (acquire, offset 1): recorded granted token 3, queued at queue "
        "position 1, the state module decides granted token 2, queued at queue position 1",
        "lock request r5 (release, offset 4): recorded no answer, the state module decides "
        "granted token 2",
    ]
    assert not report.clean


def test_requests_lost_to_retention_are_said_and_nothing_is_guessed() -> None:
    gap = RetentionGap(REQUESTS, 0, low_offset=3, first_kept_ms=T0 + 1600)
    report = redrive_locks(SETTINGS, TABLE, [*_requests()[3:], *_replies(), gap])

    assert report.differences == ()
    assert report.skipped is not None
    assert (
        "lakewarden.lock.requests no longer holds the oldest requests (partition 0 below "
        "offset 3)" in report.skipped
    )
    assert not report.clean
