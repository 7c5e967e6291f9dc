"""A faust agent reading lakewarden events from the real broker through "lakewarden-avro".

Proves faust-streaming 0.15.3 with the pinned aiokafka (0.14.0) starts against this Kafka (4.x:
aiokafka 0.12 cannot, its CreateTopics v1 was removed by KIP-896) and consumes from it, and that
a poison message reaches the agent as ``Undecodable`` (to dead-letter) instead of crashing it.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import faust
import pytest

import lakewarden.events.faust_codec  # noqa: F401  (registers "lakewarden-avro")
from lakewarden.events import Event, EventProducer, Undecodable, ensure_topics, sample_events
from lakewarden.events.topics import HEARTBEATS
from lakewarden.settings import Settings

pytestmark = pytest.mark.kafka


def test_faust_agent_consumes_events_and_poison_from_the_broker(
    kafka_settings: Settings, tmp_path: Path
) -> None:
    prefix = f"f{uuid.uuid4().hex[:8]}.lakewarden."
    settings = kafka_settings.model_copy(
        update={"kafka": kafka_settings.kafka.model_copy(update={"topic_prefix": prefix})}
    )
    ensure_topics(settings, specs=[HEARTBEATS])
    heartbeat = sample_events(table_id="t1")["Heartbeat"]
    with EventProducer(settings, producer_id="it") as producer:
        producer.send("Heartbeat", heartbeat, partition=0)
        producer.produce_bytes(
            HEARTBEATS.name(settings), b"\x00not an event", key=b"t1", partition=0
        )

    received = _run_faust_agent(settings, tmp_path, expected=2)

    assert [type(value) for value in received] == [Event, Undecodable]
    assert received[0].record["envelope"]["event_id"] == heartbeat["envelope"]["event_id"]
    assert received[1].error.reason == "bad_magic"
    assert received[1].data == b"\x00not an event"


def _run_faust_agent(settings: Settings, datadir: Path, *, expected: int) -> list[Any]:
    loop = asyncio.new_event_loop()
    app = faust.App(
        f"lakewarden-it-{uuid.uuid4().hex[:6]}",
        broker=f"kafka://{settings.kafka.bootstrap_servers}",
        store="memory://",
        datadir=str(datadir / "faust"),
        web_enabled=False,
        loop=loop,
    )
    topic = app.topic(
        HEARTBEATS.name(settings),
        value_serializer="lakewarden-avro",
        partitions=HEARTBEATS.partitions,
    )
    received: list[Any] = []

    @app.agent(topic)
    async def collect(stream: faust.StreamT[Any]) -> None:
        async for value in stream:
            received.append(value)

    async def run() -> None:
        await app.start()
        try:
            for _ in range(600):
                if len(received) >= expected:
                    return
                await asyncio.sleep(0.05)
        finally:
            await app.stop()

    try:
        loop.run_until_complete(run())
    finally:
        loop.close()
    return received
