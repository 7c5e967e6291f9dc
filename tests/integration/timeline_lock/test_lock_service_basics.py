"""timeline-lock against a real broker and the real service process: the request kinds, FIFO,
reply routing, bad requests in the DLQ, health and metrics."""

from __future__ import annotations

import logging
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from lakewarden.clients import LockClient, LockLease, LockTimeoutError
from lakewarden.clock import SystemClock
from lakewarden.events import decode
from lakewarden.events.topics import DLQ, LOCK_REPLIES, LOCK_REQUESTS
from lakewarden.settings import Settings
from lakewarden.testing import wait_until
from lakewarden_services._common.process import ServiceProcess

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def settings(shared_lock_settings: Settings, shared_lock_service: ServiceProcess) -> Settings:
    return shared_lock_settings


# The ttl of an acquire that times out: long, so a withdrawal that failed would hold the lock
# far longer than the next acquire waits.
DEAD_TTL_S = 60.0


def table() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def test_hold_grants_increasing_tokens_and_release_frees_the_lock(
    settings: Settings, make_client: type[LockClient]
) -> None:
    client = make_client(settings)
    name = table()
    tokens = []
    for _ in range(3):
        with client.hold(name, ttl_s=5, wait_s=10) as lease:
            assert not lease.lost and lease.table_id == name
            tokens.append(lease.token)
        assert lease.lost  # released
    assert tokens == [1, 2, 3]


def test_a_held_lock_makes_others_wait_and_times_them_out(
    settings: Settings, make_client: type[LockClient]
) -> None:
    first, second = make_client(settings), make_client(settings)
    with second.hold(table(), ttl_s=5, wait_s=10):  # connected before the clock runs
        pass
    name = table()
    with first.hold(name, ttl_s=5, wait_s=10) as lease:
        started = time.monotonic()
        with pytest.raises(LockTimeoutError, match=f"lock of table {name} was not granted"):
            second.acquire(name, ttl_s=DEAD_TTL_S, wait_s=0.5)
        # A lower bound only: it waited its wait_s. How promptly it gives up afterwards is
        # the machine's speed, not the protocol's (the lock benchmark measures latency).
        assert time.monotonic() - started >= 0.5
    # The timed-out acquire was withdrawn (or, if the release overtook it, granted and then
    # released by the withdrawal): either way nothing holds the lock for its ttl. Had it
    # stayed, this acquire, waiting far less than that ttl, would time out.
    with second.hold(name, ttl_s=5, wait_s=DEAD_TTL_S / 6) as after:
        assert after.token > lease.token


def test_renewals_keep_a_lease_alive_past_its_ttl(
    settings: Settings, make_client: type[LockClient]
) -> None:
    holder, waiter = make_client(settings), make_client(settings)
    name = table()
    with holder.hold(name, ttl_s=2.0, wait_s=10) as lease:
        granted_send = lease.confirmed_at
        with pytest.raises(LockTimeoutError):
            waiter.acquire(name, ttl_s=5, wait_s=5)  # 2.5 ttls: renewals kept it
        # The service confirmed a renewal sent after the first ttl ran out: the lease lives
        # on renewals, not on its first grant (no bound on how fast the machine is).
        assert not lease.lost and lease.confirmed_at > granted_send + lease.ttl_s


def test_a_stale_release_is_refused(settings: Settings, make_client: type[LockClient]) -> None:
    client = make_client(settings)
    name = table()
    lease = client.acquire(name, ttl_s=5, wait_s=10)
    assert client.release(lease, wait_s=10) is True
    stale = LockLease(table_id=name, token=lease.token, ttl_s=5, expires_at=time.monotonic() + 5)
    assert client.release(stale, wait_s=10) is False


def test_waiters_are_served_fifo(settings: Settings, make_client: type[LockClient]) -> None:
    holder = make_client(settings)
    waiters = [make_client(settings, owner=f"w{i}") for i in range(4)]
    name = table()
    order: list[int] = []
    guard = threading.Lock()

    def wait_turn(i: int, queued: threading.Event) -> None:
        def on_queued(position: int) -> None:
            queued.set()

        with waiters[i].hold(name, ttl_s=5, wait_s=30, on_queued=on_queued) as lease:
            with guard:
                order.append(i)
            assert lease.token == i + 2

    first = holder.acquire(name, ttl_s=10, wait_s=10)
    threads = []
    for i in range(4):  # each enqueued (acknowledged by the service) before the next asks
        queued = threading.Event()
        thread = threading.Thread(target=wait_turn, args=(i, queued))
        thread.start()
        assert queued.wait(10), f"waiter {i} was not queued"
        threads.append(thread)
    holder.release(first)
    for thread in threads:
        thread.join(30)
    assert order == [0, 1, 2, 3]


def test_replies_reach_only_the_partition_of_the_requesting_process(
    settings: Settings, make_client: type[LockClient]
) -> None:
    """The clients of a process share one transport: one reply partition, replies keyed by
    the transport's id, so nobody reads every reply and a process reads one partition."""
    clients = [make_client(settings, owner=f"owner-{i}") for i in range(4)]
    for client in clients:
        with client.hold(table(), ttl_s=5, wait_s=10):
            pass
    transports = {client._io for client in clients}  # noqa: SLF001
    assert len(transports) == 1
    [io] = transports
    assert io is not None
    replies = _read_all(settings, LOCK_REPLIES.name(settings))
    mine = [(p, k) for p, k in replies if k == io.client_id.encode()]
    assert len(mine) >= len(clients) and {p for p, _ in mine} == {io.reply_partition}


def test_bad_requests_go_to_the_dlq_and_the_service_keeps_serving(
    settings: Settings, make_client: type[LockClient], shared_lock_service: ServiceProcess
) -> None:
    producer = Producer(settings.kafka.librdkafka_config(logger=logging.getLogger("probe")))
    topic = LOCK_REQUESTS.name(settings)
    marker = uuid.uuid4().hex.encode()
    producer.produce(topic, b"\x00junk", key=b"bad-table", partition=0)
    producer.produce(topic, b"\x00junk" + marker, key=b"bad-table", partition=0)
    producer.produce(topic, b"\xc3\x01" + b"\xff" * 8 + marker, key=b"bad-table", partition=0)
    producer.flush(10)
    client = make_client(settings)
    with client.hold(table(), ttl_s=5, wait_s=20) as lease:  # still serving
        assert lease.token == 1
    deadline = time.monotonic() + 20
    reasons: set[str] = set()
    while time.monotonic() < deadline and len(reasons) < 3:
        for value in _read_values(settings, DLQ.name(settings)):
            record = decode(value).record
            if marker in record["value"] or record["value"] == b"\x00junk":
                reasons.add(record["reason"])
    assert {"too_short", "bad_magic", "unknown_fingerprint"} <= reasons
    status, metrics = shared_lock_service.get("/metrics")
    assert status == 200
    assert 'lakewarden_dead_letters_total{reason="too_short",service="timeline-lock"}' in metrics


def test_health_and_metrics_endpoints(
    settings: Settings, make_client: type[LockClient], shared_lock_service: ServiceProcess
) -> None:
    with make_client(settings).hold(table(), ttl_s=5, wait_s=10):
        pass
    status, body = shared_lock_service.get("/health")
    assert status == 200 and '"status": "ok"' in body
    status, text = shared_lock_service.get("/metrics")
    assert status == 200
    for name in (
        "lakewarden_lock_grants_total",
        "lakewarden_lock_wait_seconds_bucket",
        "lakewarden_lock_hold_seconds_bucket",
        "lakewarden_lock_expiries_total",
        "lakewarden_lock_queue_length",
        'lakewarden_lock_requests_total{kind="acquire",status="granted"}',
    ):
        assert name in text
    assert shared_lock_service.get("/nope")[0] == 404


def _consumer(settings: Settings) -> Consumer:
    return Consumer(
        settings.kafka.librdkafka_config(group_id=f"probe-{uuid.uuid4()}", enable_auto_commit=False)
    )


def _read_all(settings: Settings, topic: str) -> list[tuple[int, bytes | None]]:
    consumer = _consumer(settings)
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        out: list[tuple[int, bytes | None]] = []
        for partition in metadata.partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            if high == 0:
                continue
            consumer.assign([TopicPartition(topic, partition, 0)])
            seen = 0
            while seen < high:
                msg = consumer.poll(5)
                assert msg is not None, f"{topic}[{partition}] ended early"
                seen = int(msg.offset() or 0) + 1
                out.append((partition, msg.key()))
        return out
    finally:
        consumer.close()


def _read_values(settings: Settings, topic: str) -> list[bytes]:
    consumer = _consumer(settings)
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        values = []
        while len(values) < high:
            msg = consumer.poll(5)
            if msg is None:
                break
            values.append(msg.value() or b"")
        return values
    finally:
        consumer.close()


class _TurnCounter(SystemClock):
    """The system clock, counting the turns of a lock client's IO thread: the thread reads the
    clock once a turn (``LockIO._run``), after it served what that turn serves."""

    def __init__(self) -> None:
        self.turns = 0

    def monotonic(self) -> float:
        if threading.current_thread().name.startswith("lock-io-"):
            self.turns += 1  # one writer: the IO thread
        return super().monotonic()


class _CountingProducer:
    """A caller's producer (the ``producer`` a LockClient may share): counts what goes through
    it and which threads poll it."""

    def __init__(self, settings: Settings) -> None:
        self.inner = Producer(settings.kafka.librdkafka_config(acks="all"))
        self.produced: list[str] = []
        self.pollers: set[str] = set()

    def produce(self, topic: str, value: bytes, **kwargs: object) -> None:
        self.produced.append(decode(value).record["kind"])
        self.inner.produce(topic, value, **kwargs)

    def poll(self, timeout: float) -> int:
        self.pollers.add(threading.current_thread().name)
        return int(self.inner.poll(timeout))

    def flush(self, timeout: float) -> int:
        return int(self.inner.flush(timeout))

    def list_topics(self, topic: str, timeout: float) -> object:
        return self.inner.list_topics(topic, timeout=timeout)


def test_a_client_sends_through_the_producer_it_is_given_and_leaves_its_polls_to_the_owner(
    settings: Settings, make_client: type[LockClient]
) -> None:
    producer = _CountingProducer(settings)
    clock = _TurnCounter()
    shared = make_client(settings, producer=producer, clock=clock)
    own = make_client(settings)
    name = table()
    with shared.hold(name, ttl_s=5, wait_s=10) as lease:
        assert not lease.lost
    # Another client of the process keeps the shared transport, with its own producer.
    with own.hold(name, ttl_s=5, wait_s=10) as second:
        assert second.token == lease.token + 1  # the first lease was released
    assert producer.produced == ["acquire", "release"]
    turns = clock.turns
    wait_until(lambda: clock.turns >= turns + 3, 30, "three more turns of the IO thread")
    assert producer.pollers == set()  # delivery reports are the owner's to serve
    producer.poll(0)
    assert producer.flush(5) == 0
