"""Two real cancel-manager processes (``python -m lakewarden_services.cancel_manager``, one
consumer group) on the real broker, with timeline-lock and heartbeat-monitor, and cancel
requests for cancellable clustering plans across 100 tables, sent without waiting for answers;
one instance is killed with SIGKILL while the requests are being served and restarted. Every
plan is then aborted, and each cancel was executed exactly once: one ``cancel_requested`` and
one ``aborted`` entry per plan, whatever was redelivered after the kill, and never a
completion."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest
from _lake_services import Instances, instance_factory

from lakewarden.events import EventProducer, make_event
from lakewarden.settings import Settings
from lakewarden.table import EmbeddedCoordinator, Table, Transition
from lakewarden.table.timeline_state import TimelineEntry
from lakewarden.testing import wait_until
from lakewarden_services._common.process import ServiceProcess

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(900)]

TABLES = 100
SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("v", pa.string())])
MANAGER = "lakewarden_services.cancel_manager"


@pytest.fixture(scope="module")
def managers(
    lake_settings: Settings,
    coordination: list[ServiceProcess],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Instances]:
    get, started = instance_factory(MANAGER, lake_settings, tmp_path_factory, {})
    yield get
    for process in started.values():
        process.kill()


def planned_table(root: Path, i: int) -> tuple[Table, str]:
    """A table with fragmented buckets and a cancellable clustering plan on them."""
    table = Table.create(
        str(root / f"t{i:03d}"),
        name=f"t{i:03d}",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        coordinator=EmbeddedCoordinator(),
    )
    for n in range(3):
        ids = [n * 10 + k for k in range(3)]
        table.write(pa.table({"id": ids, "region": ["eu"] * 3, "v": ["x"] * 3}, schema=SCHEMA))
    instant = table.schedule_clustering(sort_by=["id"], cancellable=True)
    assert instant is not None
    return table, str(instant)


def entries_of(table: Table, instant: str) -> list[TimelineEntry]:
    return [e for e in table.timeline_log.entries() if e.instant == instant]


def aborted_by(table: Table, instant: str) -> str | None:
    """The actor that appended the plan's ``aborted``, if any."""
    for entry in entries_of(table, instant):
        if entry.transition is Transition.ABORTED:
            return entry.actor
    return None


def send_cancel(producer: EventProducer, table: Table, instant: str, kind: str) -> None:
    record = make_event(
        "CancelRequest",
        table_id=table.table_id,
        producer_id="lake-test",
        request_id=f"{kind}-{table.table_id}",
        instant=instant,
        kind=kind,
        requester="lake-test",
        reason="the lake test cancels every plan",
        table_uri=table.uri,
    )
    producer.send("CancelRequest", record)


def test_two_cancel_managers_one_killed_and_restarted_execute_every_cancel_once(
    lake_settings: Settings, managers: Instances, tmp_path: Path
) -> None:
    with ThreadPoolExecutor(4) as pool:
        plans = list(pool.map(lambda i: planned_table(tmp_path, i), range(TABLES)))
    managers("a")
    victim = managers("b")
    victim_pid = str(victim.pid)  # cancel-manager's actor ends with host:pid
    producer = EventProducer(lake_settings, producer_id="lake-test")
    for table, instant in plans:
        send_cancel(producer, table, instant, "request")
        send_cancel(producer, table, instant, "execute")
    producer.flush()

    def victim_is_serving() -> bool:
        actors = [aborted_by(t, i) for t, i in plans]
        by_victim = any(a is not None and a.rsplit(":", 1)[-1] == victim_pid for a in actors)
        return by_victim and None in actors

    wait_until(victim_is_serving, 300, "instance b to be in the middle of the requests")
    victim.kill()
    managers("b")  # restarted: same instance id, so it takes its partitions back
    wait_until(
        lambda: all(aborted_by(t, i) is not None for t, i in plans),
        300,
        "every plan to be aborted",
    )

    pids = set()
    for table, instant in plans:
        transitions = [e.transition for e in entries_of(table, instant)]
        assert transitions.count(Transition.CANCEL_REQUESTED) == 1, (table.uri, transitions)
        assert transitions.count(Transition.ABORTED) == 1, (table.uri, transitions)
        assert Transition.COMPLETED not in transitions, (table.uri, transitions)
        state = table.state().get(instant)
        assert state is not None and state.state is Transition.ABORTED
        actor = aborted_by(table, instant)
        assert actor is not None
        pids.add(actor.rsplit(":", 1)[-1])
    assert len(pids) >= 2  # both instances served part of the lake
