"""The two Kafka floors a request/reply service is measured against, shared by the kafka, lock
and cancel benchmarks.

- **one hop**: a client produces a message and consumes it itself (``hop``). Nothing a
  service does can be faster than one hop per message it must receive.
- **echo round trip**: a client produces a request, a minimal confluent-kafka loop in another
  process (``python -m benchmarks._echo_floor``, run with ``EchoService``) consumes it and
  produces it back on a reply topic, and the client consumes the reply (``echo``). That is
  what a request answered by a service costs with the service doing nothing: two hops, two
  processes, the service's own poll/produce loop. A lock acquire is one echo round trip plus
  the lock's work; a cancel request is two (the request and its result, with the lock's
  acquire inside it).

Both use the settings our clients and services use, at their best for latency: producers
``acks=all``, idempotent, and both clients with ``lakewarden.events.latency``'s settings,
the very ones of every client on a request/reply path (``linger.ms=0``, a fetch
that returns as soon as one message arrives); consumers assigned by hand; the echo loop
polls, drains what else is there and produces each reply at once, as timeline-lock's loop
does. Request partition ``i`` is answered on reply partition ``i``, so each client thread
reads only its own replies.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from confluent_kafka import Consumer, Producer, TopicPartition

from lakewarden.events import TopicSpec
from lakewarden.events.latency import LOW_LATENCY_CONSUMER, LOW_LATENCY_PRODUCER
from lakewarden.settings import Settings
from lakewarden_services._common.process import ServiceProcess

log = logging.getLogger(__name__)

_TIMEOUT_S: Final = 10.0
PARTITIONS: Final = 8  # one per client thread of the throughput rounds
HOPS: Final = TopicSpec("bench.hop", PARTITIONS, 3_600_000)
ECHO_REQUESTS: Final = TopicSpec("bench.echo-requests", PARTITIONS, 3_600_000)
ECHO_REPLIES: Final = TopicSpec("bench.echo-replies", PARTITIONS, 3_600_000)
FLOOR_TOPICS: Final = (HOPS, ECHO_REQUESTS, ECHO_REPLIES)
# What our latency-bound producers (LockClient, timeline-lock, cancel-manager) use.
PRODUCER_CONFIG: Final[dict[str, Any]] = {
    "acks": "all",
    "enable_idempotence": True,
    **LOW_LATENCY_PRODUCER,
}
# What our reply consumers (LockClient, CancelClient, the loop services) use.
CONSUMER_CONFIG: Final[dict[str, Any]] = {**LOW_LATENCY_CONSUMER, "enable_partition_eof": False}
VALUE: Final = b"x" * 120  # about a LockRequest's size
_DRAIN: Final = 500

Trip = Callable[[], None]
Close = Callable[[], None]


def hop(settings: Settings, *, partition: int = 0) -> tuple[Trip, Close]:
    """One raw produce->consume hop on ``partition`` of ``HOPS``, and a function that closes
    its clients. Threads use a partition each, so each reads only its own trips."""
    return _trip(settings, HOPS.name(settings), HOPS.name(settings), partition)


def echo(settings: Settings, *, partition: int = 0) -> tuple[Trip, Close]:
    """One round trip through the echo process on ``partition`` (``EchoService`` must run),
    and a function that closes its clients."""
    return _trip(settings, ECHO_REQUESTS.name(settings), ECHO_REPLIES.name(settings), partition)


def _trip(settings: Settings, out: str, back: str, partition: int) -> tuple[Trip, Close]:
    quiet = {"logger": log}  # librdkafka logs via logging, not stderr
    producer = Producer(settings.kafka.librdkafka_config(**PRODUCER_CONFIG, **quiet))
    consumer = Consumer(
        settings.kafka.librdkafka_config(
            group_id=f"bench-floor-{uuid.uuid4()}", **CONSUMER_CONFIG, **quiet
        )
    )
    # Start after what earlier rounds left in the partition, or the first trips would read
    # that backlog instead of waiting for their own message.
    _, high = consumer.get_watermark_offsets(
        TopicPartition(back, partition), timeout=_TIMEOUT_S, cached=False
    )
    consumer.assign([TopicPartition(back, partition, high)])
    key = f"bench-{partition}".encode()

    def trip() -> None:
        producer.produce(out, VALUE, key=key, partition=partition)
        producer.poll(0)
        while (msg := consumer.poll(_TIMEOUT_S)) is None or msg.error() is not None:
            if msg is None:
                raise TimeoutError(f"no message on {back}[{partition}] within 10 s")

    def close() -> None:
        consumer.close()
        producer.flush(_TIMEOUT_S)

    return trip, close


def quantile(values: list[float], q: float) -> float:
    """The q-quantile (inclusive method, as latency percentiles are usually reported)."""
    if q == 0.5:
        return statistics.median(values)
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def timed(trip: Callable[[], object]) -> float:
    """Milliseconds ``trip()`` took."""
    start = time.perf_counter_ns()
    trip()
    return (time.perf_counter_ns() - start) / 1e6


class EchoService:
    """The echo loop as its own process (started and stopped by pid, like our services)."""

    def __init__(self, settings: Settings, *, home: Path) -> None:
        home.mkdir(parents=True, exist_ok=True)
        self.process = ServiceProcess(
            "benchmarks._echo_floor", settings, home=home, log_level="WARNING"
        )

    def start(self) -> None:
        """Raises: DevStackError (the echo process did not become ready)."""
        self.process.start()

    def stop(self) -> None:
        self.process.stop()


def run_echo(settings: Settings, stop: threading.Event, *, on_ready: Callable[[], None]) -> None:
    """The echo loop: every message of ``ECHO_REQUESTS`` partition ``i`` is produced, as it
    is, to ``ECHO_REPLIES`` partition ``i``, until ``stop`` is set."""
    requests, replies = ECHO_REQUESTS.name(settings), ECHO_REPLIES.name(settings)
    producer = Producer(settings.kafka.librdkafka_config(**PRODUCER_CONFIG, logger=log))
    consumer = Consumer(
        settings.kafka.librdkafka_config(
            group_id=f"bench-echo-{uuid.uuid4()}", **CONSUMER_CONFIG, logger=log
        )
    )
    positions = []
    for partition in range(PARTITIONS):
        _, high = consumer.get_watermark_offsets(
            TopicPartition(requests, partition), timeout=_TIMEOUT_S, cached=False
        )
        positions.append(TopicPartition(requests, partition, high))
    consumer.assign(positions)
    on_ready()
    try:
        while not stop.is_set():
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            for each in [msg, *consumer.consume(_DRAIN, 0)]:
                if each.error() is None:
                    producer.produce(
                        replies, each.value(), key=each.key(), partition=each.partition()
                    )
            producer.poll(0)
    finally:
        consumer.close()
        producer.flush(_TIMEOUT_S)


def _main() -> None:
    """``python -m benchmarks._echo_floor``: the echo loop until SIGTERM; health (readiness)
    on ``$LAKEWARDEN_HEALTH_PORT`` once its consumer is positioned."""
    import os
    import signal

    from lakewarden_services._common.health import HealthServer

    logging.basicConfig(level=logging.WARNING)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    health = HealthServer(
        int(os.environ["LAKEWARDEN_HEALTH_PORT"]),
        lambda: (True, {"service": "bench-echo", "status": "ok"}),
    )
    try:
        run_echo(Settings(), stop, on_ready=health.start)
    finally:
        health.stop()


if __name__ == "__main__":
    _main()
