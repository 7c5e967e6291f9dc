"""``AckedTable``: a faust table whose changelog writes an agent can wait for, and the faust
behaviour that makes it necessary (its producer flush returns with a write still unsent)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import faust
import pytest
from faust.transport.producer import ProducerBuffer

from lakewarden_services._common.acked_table import AckedTable, acked_table


class Boom(Exception):
    pass


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def _table(loop: asyncio.AbstractEventLoop, sent: list[asyncio.Future[Any]]) -> AckedTable:
    """An AckedTable whose changelog topic hands out futures the test resolves (no broker)."""
    app = faust.App("acked-table-test", broker="kafka://127.0.0.1:9", loop=loop)
    table = acked_table(app, "t", partitions=4, default=None)

    def send_soon(**_: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = loop.create_future()
        sent.append(future)
        return future

    table.changelog_topic.send_soon = send_soon
    return table


def test_changelog_acked_waits_for_every_write_so_far(loop: asyncio.AbstractEventLoop) -> None:
    sent: list[asyncio.Future[Any]] = []
    table = _table(loop, sent)

    async def scenario() -> None:
        await table.changelog_acked()  # nothing written: returns at once
        table.send_changelog(2, "a", {"uri": "/a"})
        table.send_changelog(3, "b", {"uri": "/b"})
        assert table.unacked == 2
        waiting = asyncio.ensure_future(table.changelog_acked())
        sent[0].set_result(None)
        await asyncio.sleep(0.01)
        assert not waiting.done()  # the second write is not acknowledged yet
        sent[1].set_result(None)
        await asyncio.wait_for(waiting, 1)
        assert table.unacked == 0

    loop.run_until_complete(scenario())


def test_a_failed_changelog_write_is_raised_once(loop: asyncio.AbstractEventLoop) -> None:
    sent: list[asyncio.Future[Any]] = []
    table = _table(loop, sent)

    async def scenario() -> None:
        table.send_changelog(1, "a", {"uri": "/a"})
        sent[0].set_exception(Boom("broker gone"))
        await asyncio.sleep(0)
        assert table.unacked == 1  # kept until reported
        with pytest.raises(Boom, match="broker gone"):
            await table.changelog_acked()
        assert table.unacked == 0
        await table.changelog_acked()

    loop.run_until_complete(scenario())


def test_faust_flush_returns_while_a_changelog_write_is_unsent(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """Why AckedTable exists: faust flushes its producer before it commits offsets, but the
    buffer's flush counts a message taken off the buffer as flushed (and gives up after 0.1 s
    otherwise), so a commit can overtake a changelog write that is still on its way. If this
    test fails, faust's flush became a real barrier (AckedTable is then belt and braces)."""
    app = faust.App("flush-test", broker="kafka://127.0.0.1:9", loop=loop)
    buffer = ProducerBuffer(loop=loop)
    buffer.app = app
    never = asyncio.Event()
    sent: list[object] = []

    async def send_stuck(message: object) -> None:  # e.g. waiting for metadata
        await never.wait()
        sent.append(message)

    buffer._send_pending = send_stuck  # type: ignore[method-assign]

    async def scenario() -> None:
        await buffer.start()
        try:
            buffer.put("changelog write")  # type: ignore[arg-type]
            await asyncio.sleep(0.01)
            await asyncio.wait_for(buffer.flush(), 2)
            assert sent == [] and buffer.size == 0  # "flushed", never sent
        finally:
            never.set()
            await buffer.stop()

    loop.run_until_complete(scenario())
