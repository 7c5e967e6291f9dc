"""The loop steps each handler coroutine to its end itself, with no event loop."""

from __future__ import annotations

import asyncio

import pytest

from lakewarden_services._common.loop_service import HandlerSuspendedError, run_to_end


async def _awaits_coroutines(done: list[str]) -> None:
    async def step(name: str) -> None:
        done.append(name)

    await step("decode")
    await step("result")


def test_a_handler_that_never_suspends_runs_to_its_end() -> None:
    done: list[str] = []
    run_to_end(_awaits_coroutines(done))
    assert done == ["decode", "result"]


def test_an_exception_of_the_handler_reaches_the_loop() -> None:
    async def fails() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        run_to_end(fails())


def test_a_handler_that_suspends_is_a_named_error_and_is_closed() -> None:
    finished: list[bool] = []

    async def sleeps() -> None:
        try:
            await asyncio.sleep(0)  # yields to an event loop the service loop has not
        finally:
            finished.append(True)

    with pytest.raises(HandlerSuspendedError, match="suspends"):
        run_to_end(sleeps())
    assert finished == [True]  # closed: no "never awaited" coroutine left behind
