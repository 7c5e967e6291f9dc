"""The codec registered for faust, driven through a real faust agent with test_context.

This also proves faust-streaming 0.15.3 runs with the pinned aiokafka (0.14.0) in this environment.
"""

from __future__ import annotations

import asyncio
from typing import Any

import faust
import pytest
from faust.serializers import codecs

from lakewarden.events import Event, EventEncodeError, Undecodable, encode, sample_events
from lakewarden.events.faust_codec import CODEC_NAME, LakewardenAvroCodec, register


def _run_agent(values: list[bytes]) -> list[Any]:
    """Put raw message values through an agent reading a topic declared with our codec, the
    way a service declares it; return what the agent received, in order."""
    loop = asyncio.new_event_loop()
    # test_context never connects: the broker URL only has to name a transport.
    app = faust.App("lakewarden-codec-test", broker="kafka://127.0.0.1:9", loop=loop)
    topic = app.topic("lakewarden.heartbeats", value_serializer=CODEC_NAME)
    received: list[Any] = []

    @app.agent(topic)
    async def collect(stream: faust.StreamT[Any]) -> None:
        async for value in stream:
            received.append(value)

    async def drive() -> None:
        # Feed the topic itself: a Topic decodes each message with its value_serializer,
        # exactly as it does for messages from the broker (a plain test channel would not).
        async with collect.test_context(channel=topic) as agent:
            for value in values:
                await agent.put(value)

    try:
        loop.run_until_complete(drive())
    finally:
        loop.close()
        # The agent's stream created the app's aiokafka consumer, whose (never started)
        # consumer thread owns a second event loop; close it too, or it leaks its sockets.
        thread = getattr(getattr(app, "_consumer", None), "_thread", None)
        thread_loop = getattr(thread, "thread_loop", None)
        if thread_loop is not None:
            thread_loop.close()
    return received


def test_codec_is_registered_once_under_its_name() -> None:
    registered = codecs.get_codec(CODEC_NAME)
    register()
    assert codecs.get_codec(CODEC_NAME) is registered
    assert isinstance(registered, LakewardenAvroCodec)


def test_agent_receives_decoded_events_and_undecodable_values() -> None:
    events = sample_events(table_id="t7")
    received = _run_agent(
        [
            encode("Heartbeat", events["Heartbeat"]),
            b"\x00junk",
            encode("LockRequest", events["LockRequest"]),
        ]
    )

    assert [type(value) for value in received] == [Event, Undecodable, Event]
    assert received[0].name == "Heartbeat"
    assert received[0].record["seq"] == events["Heartbeat"]["seq"]
    assert received[0].record["envelope"]["table_id"] == "t7"
    assert received[1].error.reason == "too_short"
    assert received[1].data == b"\x00junk"
    assert received[2].name == "LockRequest" and received[2].record["kind"] == "acquire"


def test_faust_dumps_and_loads_round_trip() -> None:
    record = sample_events()["JobCommitResult"]
    data = codecs.dumps(CODEC_NAME, Event("JobCommitResult", record))
    assert data == encode("JobCommitResult", record)
    assert codecs.loads(CODEC_NAME, data).record["status"] == "committed"
    # a plain (name, record) tuple encodes the same way
    assert codecs.dumps(CODEC_NAME, ("JobCommitResult", record)) == data


def test_faust_dumps_rejects_non_events() -> None:
    with pytest.raises(EventEncodeError, match="cannot encode dict: faust values must be Event"):
        codecs.dumps(CODEC_NAME, {"not": "an event"})
