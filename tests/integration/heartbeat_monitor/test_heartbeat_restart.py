"""A monitor restart (kill -9, then start) declares no live writer dead; a writer that died
while the monitor was away is declared dead one tolerance after the monitor is back."""

from __future__ import annotations

import time

from hbtools import (
    INTERVAL_S,
    TOLERANCE_S,
    Expiries,
    Writer,
    hold,
    new_instant,
    wait_for_beats,
)

from lakewarden.clients.liveness import Liveness
from lakewarden.settings import Settings
from lakewarden.table.coordinator import Liveness as Verdict
from lakewarden.testing import wait_until
from lakewarden_services._common.process import ServiceProcess


def wait_alive(settings: Settings, instants: list[str]) -> None:
    """Return once the monitor has seen a beat of every instant (its view says ALIVE)."""
    with Liveness(settings) as view:
        for instant in instants:
            wait_until(
                lambda instant=instant: view.status("t1", instant) is Verdict.ALIVE,
                30,
                f"the monitor to see {instant}",
            )


def test_monitor_restart_produces_no_false_deaths(
    monitor: ServiceProcess, hb_settings: Settings, expiries: Expiries, writers: list[Writer]
) -> None:
    alive = [new_instant() for _ in range(4)]
    for instant in alive:
        hold(writers, hb_settings, instant)
    dies_meanwhile = new_instant()
    doomed = hold(writers, hb_settings, dies_meanwhile)
    wait_alive(hb_settings, [*alive, dies_meanwhile])

    monitor.kill()
    killed_ms = doomed.kill()
    # Away longer than the tolerance, no beat judged meanwhile: a live writer's beat stamped
    # (broker time, the monitor's) a tolerance and a second after the kill is the proof.
    away_until_ms = killed_ms + round((TOLERANCE_S + 1.0) * 1000)
    wait_for_beats(hb_settings, alive[0], 1, stamped_from_ms=away_until_ms)
    monitor.start()
    back_ms = time.time_ns() // 1_000_000

    expired = expiries.wait_for(dies_meanwhile, timeout_s=15)
    # Not before one tolerance after the monitor came back (the grace). How soon after it is
    # a speed, measured by the heartbeat benchmark, not asserted on a shared machine.
    assert back_ms - 1_000 + TOLERANCE_S * 1000 < expired["detected_ms"]
    expiries.settle()  # a false death would have been published by now
    assert not set(alive) & set(expiries.by_instant), "a live writer was declared dead"

    # The restarted monitor still judges: a kill now is seen as usual.
    victim = hold(writers, hb_settings, new_instant())
    instant = victim.process.args[4]  # type: ignore[index]
    wait_alive(hb_settings, [instant])
    killed_ms = victim.kill()
    expired = expiries.wait_for(instant)
    # no sooner than the tolerance after its last beat, which came at most an interval before
    assert expired["detected_ms"] - killed_ms > (TOLERANCE_S - INTERVAL_S) * 1000
    assert len(expiries.by_instant[dies_meanwhile]) == 1
