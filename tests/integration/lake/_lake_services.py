"""Helpers of the lake tests: named service instances in one consumer group."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lakewarden.settings import Settings
from lakewarden_services._common.process import ServiceProcess

BEAT = {"LAKEWARDEN_HEARTBEAT__INTERVAL_S": "0.3", "LAKEWARDEN_HEARTBEAT__TOLERABLE_MISSES": "3"}
Instances = Callable[..., ServiceProcess]


def instance_factory(
    module: str,
    settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
    env: dict[str, str],
) -> tuple[Instances, dict[str, ServiceProcess]]:
    """``get(name)``: the running instance ``name`` of ``module`` (static membership under
    ``name``: a restart takes its partitions back), started if it is not running."""
    started: dict[str, ServiceProcess] = {}

    def get(name: str) -> ServiceProcess:
        process = started.get(name)
        if process is None:
            home = tmp_path_factory.mktemp(f"{module.rsplit('.', 1)[-1]}-{name}")
            process = ServiceProcess(
                module, settings, home=home, instance_id=name, extra_env={**BEAT, **env}
            )
            started[name] = process
        process.start()
        return process

    return get, started
