"""The cleaner's queue order (triggered tables before swept ones), how an instance follows its
assignment (tables no longer owned dropped, tables gained swept), and the per-phase timing of
a clean."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakewarden.settings import Settings
from lakewarden.table import CleanPolicy, EmbeddedCoordinator, Table
from lakewarden.table.coordinator import Lease
from lakewarden_services._common.dlq import DeadLetters
from lakewarden_services.cleaner import metrics
from lakewarden_services.cleaner.handler import EventHandler
from lakewarden_services.cleaner.phases import PHASES, TimedCoordinator, measure
from lakewarden_services.cleaner.protocol import Trigger
from lakewarden_services.cleaner.queue import CleanQueue
from lakewarden_services.cleaner.worker import CleanWorker

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


def taken(queue: CleanQueue) -> list[str]:
    order = []
    while (work := queue.take()) is not None:
        order.append(work.table_id)
        queue.done(work.table_id)
    return order


def test_triggered_tables_are_cleaned_before_swept_ones() -> None:
    queue = CleanQueue()
    for table in ("a", "b", "c"):
        queue.add(Trigger(table, "periodic sweep"), f"/t/{table}", 1.0, swept=True)
    queue.add(Trigger("d", "commit completed"), "/t/d", 2.0)
    queue.add(Trigger("c", "commit completed", dead=("i1",)), "/t/c", 3.0)  # promoted
    queue.add(Trigger("d", "periodic sweep"), "/t/d", 4.0, swept=True)  # stays triggered
    assert len(queue) == 4
    assert taken(queue) == ["d", "c", "a", "b"]


def test_a_promoted_entry_keeps_what_the_sweep_merged() -> None:
    queue = CleanQueue()
    queue.add(Trigger("a", "periodic sweep"), "/t/a", 1.0, swept=True)
    queue.add(Trigger("a", "requested", policy="keep-latest-commits=2"), "/t/a", 2.0)
    work = queue.take()
    assert work is not None and work.queued_at == 1.0
    assert work.why == ["periodic sweep", "requested"] and work.policy == "keep-latest-commits=2"


def handler(registry: dict[str, Any], queue: CleanQueue) -> EventHandler:
    letters = DeadLetters(None, service="cleaner", consumer_group="g")  # type: ignore[arg-type]
    return EventHandler(
        registry=registry, queue=queue, dead_letters=letters, wake=lambda: None, clock=lambda: 0.0
    )


def test_a_new_assignment_drops_tables_no_longer_owned_and_sweeps_the_gained() -> None:
    """After a rebalance the old owner must not keep cleaning the tables it gave away (it
    would race their new owner and leave its own tables waiting), and the new owner must
    queue them (what the old owner had queued for them is dropped there)."""
    registry = {
        "a": {"uri": "/t/a", "partition": 0},
        "b": {"uri": "/t/b", "partition": 1},
        "c": {"uri": "/t/c", "partition": 2},
    }
    queue = CleanQueue()
    h = handler(registry, queue)
    h.report({0, 1, 2})  # the first assignment: every owned table is swept
    assert len(queue) == 3
    h.enqueue(Trigger("b", "commit completed"), "transition")
    h.report({0, 1, 2})  # unchanged: nothing happens
    assert len(queue) == 3
    h.report(set())  # between revocation and assignment: nothing happens
    assert len(queue) == 3
    del registry["b"], registry["c"]  # partitions 1 and 2 went to another instance
    registry["d"] = {"uri": "/t/d", "partition": 3}
    h.report({0, 3})
    assert taken(queue) == ["a", "d"]


def test_a_sweep_queues_behind_triggered_tables() -> None:
    registry = {t: {"uri": f"/t/{t}", "partition": 0} for t in ("a", "b")}
    queue = CleanQueue()
    h = handler(registry, queue)
    assert h.sweep({0}) == 2
    h.enqueue(Trigger("b", "commit completed"), "transition")
    assert taken(queue) == ["b", "a"]


class SlowLock(EmbeddedCoordinator):
    """An embedded coordinator whose grants and announcements take a while."""

    @contextmanager
    def lock(self, table_id: str, *, ttl_s: float = 30.0, wait_s: float = 30.0) -> Iterator[Lease]:
        time.sleep(0.02)
        with super().lock(table_id, ttl_s=ttl_s, wait_s=wait_s) as lease:
            yield lease

    def announce(self, table_id: str, entry: Any) -> None:
        time.sleep(0.01)


def test_measure_splits_a_clean_into_its_phases() -> None:
    coordinator = TimedCoordinator(SlowLock())
    with measure(queued_s=1.5) as phases:
        with coordinator.lock("t"):
            time.sleep(0.03)  # the caller's own work under the lock: storage
        coordinator.announce("t", None)  # type: ignore[arg-type]
    assert phases["queue_wait"] == 1.5
    assert 0.02 <= phases["lock_acquire"] < 0.1 and 0.01 <= phases["announce"] < 0.1
    assert 0.03 <= phases["storage"] < 0.1
    coordinator.announce("t", None)  # type: ignore[arg-type]  # outside a clean: not counted
    assert phases["announce"] < 0.1


def test_a_clean_reports_its_phases(tmp_path: Path) -> None:
    coordinator = SlowLock()
    table = Table.create(
        str(tmp_path / "t"),
        name="t",
        record_key="id",
        schema=SCHEMA,
        coordinator=coordinator,
        clean_policy=CleanPolicy(commits_retained=1, retention_window_s=0),
    )
    for version in range(2):
        table.write(pa.Table.from_pylist([{"id": 1, "v": str(version)}], schema=SCHEMA))
    queue = CleanQueue()
    queue.add(Trigger(table.table_id, "test"), table.uri, time.monotonic() - 2.0)
    work = queue.take()
    assert work is not None

    def total(phase: str) -> float:
        value = metrics.PHASE.labels(phase)._sum.get()  # type: ignore[attr-defined]
        return float(value)

    before = {phase: total(phase) for phase in PHASES}
    result = CleanWorker(Settings(), lambda: coordinator).clean(work)
    assert result.files_deleted == 1
    spent = {phase: total(phase) - before[phase] for phase in PHASES}
    assert spent["queue_wait"] == pytest.approx(2.0, abs=0.5)
    assert spent["lock_acquire"] >= 0.04  # the plan's lock section and the completion's
    assert spent["announce"] >= 0.02 and spent["storage"] > 0
