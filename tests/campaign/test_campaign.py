"""A few fixed seeds of the fault campaign, short, in ``make test``.

One stack for the module (Kafka and the services Python writers use: timeline-lock,
heartbeat-monitor, cleaner), one short run per seed against it. The seeds were picked so that
together they kill and pause writers, kill and pause services, pause the broker, arm storage
faults in every writer, and write copy-on-write and merge-on-read tables. ``make campaign``
runs many more, longer, with SeaweedFS and every service (tests/campaign/campaign.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _runner import reproduce_command, run_one
from _schedule import make_plan
from _stack import WORKLOAD_SERVICES, CampaignStack

from lakewarden.devstack import processes

DURATION_S = 8.0
# 18: kills a writer and a service, MOR table, 3 writers; 22: kills a writer, pauses the broker;
# 13: pauses a service, kills a writer, a MOR and a COW table.
SEEDS = (18, 22, 13)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CampaignStack]:
    stack = CampaignStack(
        tmp_path_factory.mktemp("campaign-stack"), with_s3=False, services=WORKLOAD_SERVICES
    )
    try:
        stack.up()
        yield stack
    finally:
        pids = stack.pids()
        stack.down()
        assert [pid for pid in pids if processes.group_members(pid)] == []


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("seed", SEEDS)
def test_campaign_seed(seed: int, stack: CampaignStack, tmp_path: Path) -> None:
    plan = make_plan(seed, duration_s=DURATION_S, services=stack.services, s3_available=False)
    result = run_one(stack, plan, tmp_path / f"run-{seed}")
    assert sum(result.faults.values()) > 0, result.summary()
    assert result.outcomes["ok"] > 0, f"no write succeeded: {result.summary()}"
    assert result.violations == [], (
        f"{result.summary()}\n"
        + "\n".join(f"  {v}" for v in result.violations)
        + f"\nreproduce: {reproduce_command(seed, DURATION_S)} (files in {tmp_path})"
    )
