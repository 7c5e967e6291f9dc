"""The Kafka produce->consume round-trip floor on this broker, p50 and p99.

One message at a time: produce, then poll until that message is consumed; the clock runs from
the produce call to the consumed message in hand. The floor is raw confluent-kafka with
pre-encoded bytes (acks=all, idempotent, linger.ms=0); measured beside it, interleaved message
by message on a topic of its own, is the same trip through EventProducer/EventConsumer
(encode, key by table, decode, offset store). Also interleaved: the echo round trip
(``_echo_floor``: request -> a do-nothing confluent-kafka echo process -> reply), the floor
of anything answered by a service, reported against the raw hop (two hops and a process in
between: about 2x). The lock and cancel benchmarks measure both floors again in their own run.
"""

from __future__ import annotations

import logging
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from benchmarks._echo_floor import FLOOR_TOPICS, EchoService, echo
from benchmarks._registry import BenchContext, Result, benchmark
from benchmarks._rounds import rotated_rounds
from lakewarden.events import EventConsumer, EventProducer, TopicSpec, encode, ensure_topics
from lakewarden.events.samples import sample_events
from lakewarden.settings import Settings

_TIMEOUT_S = 10.0
_PRODUCER_CONFIG: dict[str, Any] = {"acks": "all", "enable_idempotence": True, "linger_ms": 0}
RAW = TopicSpec("bench.raw", 1, 3_600_000)
EVENTS = TopicSpec("bench.events", 1, 3_600_000)


@benchmark("kafka", "single-message produce->consume round trip (p50, p99) on the broker")
def kafka_round_trip(ctx: BenchContext) -> Iterator[Result]:
    base = ctx.kafka_settings()
    run = uuid.uuid4().hex[:8]
    kafka = base.kafka.model_copy(update={"topic_prefix": f"lakewarden.bench-{run}."})
    settings = base.model_copy(update={"kafka": kafka})
    ensure_topics(settings, specs=(RAW, EVENTS, *FLOOR_TOPICS))
    echo_service = EchoService(settings, home=Path(tempfile.mkdtemp(prefix="lakewarden-echo-")))
    echo_service.start()
    try:
        raw, ours, echoed = _measure(
            settings, samples=ctx.scale(1_000, 100), warmup=ctx.scale(300, 30)
        )
    finally:
        echo_service.stop()
        _delete_topics(settings)
    for label, quantile in (("p50", 0.50), ("p99", 0.99)):
        yield Result(
            benchmark="kafka",
            metric=f"round trip {label}",
            unit="ms",
            value=_quantile(ours, quantile),
            baseline=_quantile(raw, quantile),
            baseline_label="raw confluent-kafka (the floor)",
            details={
                "floor_ms": round(_quantile(raw, quantile), 3),
                "samples": len(raw),
                "raw_mean_ms": round(statistics.fmean(raw), 3),
                "ours_mean_ms": round(statistics.fmean(ours), 3),
                "raw_max_ms": round(max(raw), 3),
                "ours_max_ms": round(max(ours), 3),
            },
        )
        yield Result(
            benchmark="kafka",
            metric=f"echo round trip {label}",
            unit="ms",
            value=_quantile(echoed, quantile),
            baseline=_quantile(raw, quantile),
            baseline_label="raw confluent-kafka (the floor)",
            details={
                "floor_ms": round(_quantile(raw, quantile), 3),
                "samples": len(echoed),
                "echo_mean_ms": round(statistics.fmean(echoed), 3),
                "echo_max_ms": round(max(echoed), 3),
            },
        )


def _measure(
    settings: Settings, *, samples: int, warmup: int
) -> tuple[list[float], list[float], list[float]]:
    """Round-trip times in ms for the raw pair, the lakewarden pair and the echo round trip,
    interleaved."""
    record = sample_events(table_id="bench")["Heartbeat"]
    value = encode("Heartbeat", record)
    quiet = {"logger": logging.getLogger(__name__)}  # librdkafka logs via logging, not stderr
    producer = Producer(settings.kafka.librdkafka_config(**_PRODUCER_CONFIG, **quiet))
    consumer = Consumer(
        settings.kafka.librdkafka_config(group_id=f"bench-raw-{uuid.uuid4()}", **quiet)
    )
    consumer.assign([TopicPartition(RAW.name(settings), 0, 0)])
    events_out = EventProducer(settings, producer_id="bench", **_PRODUCER_CONFIG)
    events_in = EventConsumer(settings, group_id=f"bench-{uuid.uuid4()}", topics=[EVENTS])
    echo_trip, close_echo = echo(settings)

    def raw_trip() -> None:
        producer.produce(RAW.name(settings), value, key=b"bench")
        producer.poll(0)
        while (msg := consumer.poll(_TIMEOUT_S)) is None or msg.error() is not None:
            if msg is None:
                raise TimeoutError("raw round trip: no message within 10 s")

    def our_trip() -> None:
        events_out.send("Heartbeat", record, topic=EVENTS)
        if events_in.poll(_TIMEOUT_S) is None:
            raise TimeoutError("lakewarden round trip: no event within 10 s")

    try:
        # The first trips pay for connections, the group join and a freshly started broker's
        # JIT warm-up.
        for _ in range(warmup):
            raw_trip()
            our_trip()
            echo_trip()
        # Rotate who goes first, so none always follows another's trip.
        trips = rotated_rounds(
            samples,
            {
                "raw": lambda _: _timed(raw_trip),
                "ours": lambda _: _timed(our_trip),
                "echo": lambda _: _timed(echo_trip),
            },
        )
        return trips["raw"], trips["ours"], trips["echo"]
    finally:
        close_echo()
        consumer.close()
        events_in.close()
        producer.flush(_TIMEOUT_S)
        events_out.close()


def _timed(trip: Callable[[], None]) -> float:
    start = time.perf_counter_ns()
    trip()
    return (time.perf_counter_ns() - start) / 1e6


def _quantile(values: list[float], q: float) -> float:
    """The q-quantile (inclusive method, as latency percentiles are usually reported)."""
    if q == 0.5:
        return statistics.median(values)
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def _delete_topics(settings: Settings) -> None:
    admin = AdminClient(settings.kafka.librdkafka_config(logger=logging.getLogger(__name__)))
    names = [spec.name(settings) for spec in (RAW, EVENTS, *FLOOR_TOPICS)]
    futures = admin.delete_topics(names)
    for future in futures.values():
        future.result(_TIMEOUT_S)
