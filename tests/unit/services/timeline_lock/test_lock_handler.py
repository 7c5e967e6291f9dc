"""timeline-lock's handler and expiry scanner, driven without Kafka: parsing and
routing checks, dead letters for every kind of bad request, redelivery, expiry requests."""

from __future__ import annotations

from typing import Any

import pytest

from lakewarden.clients import lock_request, table_partition
from lakewarden.events import encode, sample_events
from lakewarden.lock.state import Reply
from lakewarden_services._common.dlq import DEAD_LETTERS
from lakewarden_services.timeline_lock import metrics
from lakewarden_services.timeline_lock.handler import Consumed, ExpiryScanner, RequestHandler
from lakewarden_services.timeline_lock.metrics import REQUESTS
from lakewarden_services.timeline_lock.state_json import lock_from_json

PARTITIONS = 6
REPLIES = "lakewarden.lock.replies"


class Harness:
    def __init__(self, *, now_ms: int = 1_000) -> None:
        self.table: dict[str, Any] = {}
        self.replies: list[tuple[str, Reply]] = []
        self.dlq: list[dict[str, Any]] = []
        self.changed: list[str] = []
        self.now_ms = now_ms
        self.offset = 0
        self.handler = RequestHandler(
            table=self.table,
            reply_topic=REPLIES,
            partitions=lambda: PARTITIONS,
            reply_partitions=lambda: PARTITIONS,
            consumer_group="g",
            clock=lambda: self.now_ms,
        )

    def _handle(self, message: Consumed) -> None:
        effects = self.handler.handle(message)
        self.replies.extend(effects.replies)
        self.changed.extend(effects.changelog)
        self.dlq.extend(effects.dead_letters)

    def feed(
        self,
        record: dict[str, Any],
        *,
        name: str = "LockRequest",
        key: bytes | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        table_id = record["envelope"]["table_id"]
        value = encode(name, record)
        message = Consumed(
            "lakewarden.lock.requests",
            table_partition(table_id, PARTITIONS) if partition is None else partition,
            self.offset if offset is None else offset,
            table_id.encode() if key is None else key,
            value,
        )
        self.offset += 1
        self._handle(message)

    def feed_bytes(self, value: bytes, *, key: bytes = b"t1") -> None:
        topic = "lakewarden.lock.requests"
        message = Consumed(topic, 0, self.offset, key, value)
        self.offset += 1
        self._handle(message)

    def dead_letters(self) -> list[dict[str, Any]]:
        return list(self.dlq)


def req(kind: str = "acquire", table_id: str = "t1", **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "table_id": table_id,
        "producer_id": "test",
        "request_id": "r1",
        "kind": kind,
        "owner": "w1",
        "ttl_ms": 1_000,
        "reply_topic": REPLIES,
        "reply_partition": 4,
        "reply_key": "client-1",
    }
    return lock_request(**{**base, **fields})


def test_acquire_is_applied_stored_and_answered_on_the_requested_route() -> None:
    h = Harness()
    h.feed(req())
    assert lock_from_json(h.table["t1"]).holder.token == 1  # type: ignore[union-attr]
    [(table_id, reply)] = h.replies
    assert table_id == "t1" and reply.status == "granted" and reply.token == 1
    assert reply.route.partition == 4 and reply.route.key == "client-1"
    assert h.dlq == [] and h.changed == ["t1"]  # the new lock goes to the changelog


def test_a_redelivered_request_is_skipped() -> None:
    h = Harness()
    h.feed(req(), offset=10)
    h.feed(req(request_id="r2", owner="w2"), offset=11)
    h.feed(req(request_id="r3", owner="w3"), offset=11)  # redelivery of offset 11
    assert h.changed == ["t1", "t1"]  # nothing written for the redelivery
    assert [w["request_id"] for w in h.table["t1"]["queue"]] == ["r2"]
    assert [r.request_id for _, r in h.replies] == ["r1", "r2"]


def _counted(kind: str, status: str) -> float:
    return REQUESTS.labels(kind, status)._value.get()


def test_metrics_are_counted_when_the_worker_says_so() -> None:
    """The worker hands a request's replies to librdkafka first and counts it after
    (``handle(account=False)``, then ``account``); a plain ``handle`` counts at once."""
    h = Harness()
    before = _counted("acquire", "granted")
    queued_before = _counted("acquire", "queued")
    effects = h.handler.handle(
        Consumed(
            "lakewarden.lock.requests",
            table_partition("t1", PARTITIONS),
            0,
            b"t1",
            encode("LockRequest", req()),
            timestamp_ms=900,
        ),
        account=False,
    )
    assert [r.status for _, r in effects.replies] == ["granted"]
    assert _counted("acquire", "granted") == before  # not yet
    h.handler.account(effects)
    assert _counted("acquire", "granted") == before + 1
    assert effects.delay_s == pytest.approx(0.1)  # from the message's timestamp to its handling
    h.feed(req(request_id="r2", owner="w2"), offset=1)  # counted by a plain handle
    assert _counted("acquire", "queued") == queued_before + 1


def test_labelled_children_are_resolved_once() -> None:
    assert metrics.requests("release", "granted") is REQUESTS.labels("release", "granted")
    assert metrics.requests("release", "granted") is metrics.requests("release", "granted")
    assert metrics.ended("released") is metrics.ENDED.labels("released")


def _dlq_count(reason: str) -> float:
    return DEAD_LETTERS.labels("timeline-lock", reason)._value.get()


@pytest.mark.parametrize(
    ("feed", "reason", "detail"),
    [
        (lambda h: h.feed_bytes(b"\x00\x01junk"), "too_short", "too_short"),
        (lambda h: h.feed_bytes(b"\xc3\x01" + b"\x00" * 12), "unknown_fingerprint", "writer"),
        (
            lambda h: h.feed(sample_events(table_id="t1")["Heartbeat"], name="Heartbeat"),
            "unexpected_event",
            "a Heartbeat event",
        ),
        (lambda h: h.feed(req(), key=b"other"), "key_mismatch", "is not the table id"),
        (
            lambda h: h.feed(req(), partition=(table_partition("t1", PARTITIONS) + 1) % 6),
            "misrouted",
            "expected",
        ),
        (lambda h: h.feed(req(ttl_ms=0)), "invalid_request", "acquire needs ttl_ms > 0"),
        (lambda h: h.feed(req("renew")), "invalid_request", "renew needs the token"),
        (lambda h: h.feed(req(owner="")), "invalid_request", "owner is empty"),
        (
            lambda h: h.feed(req(reply_topic="lakewarden.timeline")),
            "invalid_request",
            "this service answers on lakewarden.lock.replies",
        ),
        (lambda h: h.feed(req(reply_partition=99)), "invalid_request", "reply_partition 99"),
    ],
)
def test_bad_requests_are_dead_lettered_and_the_handler_keeps_serving(
    feed: Any, reason: str, detail: str
) -> None:
    h = Harness()
    before = _dlq_count(reason)
    feed(h)
    [letter] = h.dead_letters()
    assert letter["reason"] == reason and detail in letter["detail"]
    assert letter["topic"] == "lakewarden.lock.requests" and letter["value"]
    assert _dlq_count(reason) == before + 1
    assert "t1" not in h.table
    h.feed(req(request_id="good"))  # still serving
    assert h.replies[-1][1].request_id == "good" and h.replies[-1][1].status == "granted"


def test_an_invalid_request_with_a_usable_route_is_also_refused() -> None:
    h = Harness()
    h.feed(req(ttl_ms=-5))
    [(_, reply)] = h.replies
    assert reply.status == "refused" and "ttl_ms > 0" in (reply.reason or "")
    h2 = Harness()
    h2.feed(req(reply_partition=99))  # its route is unusable: dead letter only
    assert h2.replies == [] and len(h2.dead_letters()) == 1


def test_expiry_scanner_sends_one_expire_per_overdue_lease_version() -> None:
    h = Harness(now_ms=1_000)
    h.feed(req(table_id="a", ttl_ms=500))
    h.feed(req(table_id="b", ttl_ms=5_000))
    h.feed(req(table_id="b", request_id="r2", owner="w2"))
    sent: list[tuple[str, dict[str, Any]]] = []

    def send(table_id: str, record: dict[str, Any]) -> None:
        sent.append((table_id, record))

    clock = {"now": 1_400}
    scanner = ExpiryScanner(
        table=h.table,
        send_request=send,
        owned_since=lambda: 0,
        producer_id="timeline-lock",
        clock=lambda: clock["now"],
        resend_after_ms=2_000,
    )
    assert scanner.tick() == 0
    clock["now"] = 1_500
    assert scanner.tick() == 1
    [(table_id, record)] = sent
    assert table_id == "a" and record["kind"] == "expire"
    assert record["token"] == 1 and record["lease_expires_ms"] == 1_500
    clock["now"] = 2_000
    assert scanner.tick() == 0  # in flight: not asked again yet
    clock["now"] = 3_600
    assert scanner.tick() == 1  # no answer for 2 s: asked again
    h.feed(record)  # the agent applies it
    assert h.table["a"]["holder"] is None
    assert h.replies[-1][1].status == "expired" and h.replies[-1][1].request_id == "r1"


def test_expiry_scanner_gives_holders_a_full_ttl_after_a_takeover() -> None:
    h = Harness(now_ms=1_000)
    h.feed(req(ttl_ms=500))
    sent: list[Any] = []

    def send(table_id: str, record: dict[str, Any]) -> None:
        sent.append(record)

    now = {"ms": 10_000}
    scanner = ExpiryScanner(
        table=h.table,
        send_request=send,
        owned_since=lambda: 9_800,  # this instance took the partition over at 9.8 s
        producer_id="timeline-lock",
        clock=lambda: now["ms"],
    )
    assert scanner.tick() == 0  # deadline passed long ago, but 9.8 + 0.5 > 10
    now["ms"] = 10_300
    assert scanner.tick() == 1


def test_a_fire_and_forget_release_is_not_answered_but_the_next_holder_is() -> None:
    h = Harness()
    h.feed(req())
    h.feed(req(request_id="r2", owner="w2", reply_key="client-2"))
    h.feed(req("release", request_id="rel", token=1, reply_topic="", reply_partition=None))
    assert [(r.request_id, r.status) for _, r in h.replies] == [
        ("r1", "granted"),
        ("r2", "queued"),
        ("r2", "granted"),
    ]
    assert h.dlq == []


def test_a_handler_failure_dead_letters_the_request_and_serving_goes_on() -> None:
    h = Harness()
    h.table["t1"] = {"not": "a lock"}  # corrupt state: the handler raises on it
    h.feed(req())
    [letter] = h.dead_letters()
    assert letter["reason"] == "handler_error" and letter["error_type"] == "KeyError"
    h.feed(req(table_id="t2", request_id="ok"))
    assert h.replies[-1][1].request_id == "ok" and h.replies[-1][1].status == "granted"
