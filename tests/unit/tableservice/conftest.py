"""Fixtures of the table-service tests: a bucketed table on memory, local and S3 storage, and
a Spark-like append that leaves several slices per bucket (what clustering rewrites)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# The in-memory store lives beside the timeline tests.
sys.path.insert(0, str(Path(__file__).parents[1] / "table"))

from _memstore import MemStorage  # noqa: E402
from service_tables import SCHEMA  # noqa: E402

from lakewarden.api.table import Table  # noqa: E402
from lakewarden.settings import Settings  # noqa: E402
from lakewarden.table.config import TableConfig, save_new_config  # noqa: E402
from lakewarden.table.coordinator import EmbeddedCoordinator  # noqa: E402

MakeTable = Callable[..., Table]


@pytest.fixture(params=["memory", "local"])
def make_table(request: pytest.FixtureRequest, tmp_path: Path) -> MakeTable:
    """``make_table(**config)`` -> a new bucketed table on memory or local storage; tables
    made by one factory share the embedded coordinator (one process)."""
    return _factory(request, tmp_path, request.param)


@pytest.fixture(params=["memory", "local", pytest.param("s3", marks=pytest.mark.s3)])
def make_any_table(request: pytest.FixtureRequest, tmp_path: Path) -> MakeTable:
    """``make_table`` and also S3 (SeaweedFS): for the core scenarios only (S3 is slow)."""
    return _factory(request, tmp_path, request.param)


def _factory(request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> MakeTable:
    coordinator = EmbeddedCoordinator()
    counter = iter(range(1000))

    def make(**overrides: Any) -> Table:
        args: dict[str, Any] = {
            "name": "orders",
            "record_key": "id",
            "schema": SCHEMA,
            "partition_by": ["region"],
            "ordering_field": "ts",
            "buckets": 2,
        }
        args.update(overrides)
        n = next(counter)
        if backend == "memory":
            storage = MemStorage()
            config = TableConfig.new(**args)
            save_new_config(storage, config)
            return Table(storage, config, coordinator=coordinator, actor="executor-a")
        if backend == "local":
            uri = str(tmp_path / f"t{n}")
            return Table.create(uri, coordinator=coordinator, **args)
        s3_settings: Settings = request.getfixturevalue("s3_settings")
        bucket: str = request.getfixturevalue("s3_bucket")
        uri = f"s3://{bucket}/{tmp_path.name}/t{n}"
        return Table.create(uri, settings=s3_settings, coordinator=coordinator, **args)

    return make
