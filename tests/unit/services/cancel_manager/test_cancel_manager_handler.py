"""cancel-manager's parsing and handlers, driven without Kafka: every status of a
CancelResult, the transitions published before it, dead letters for bad events, and the
execute_cancel it runs by itself when a cancel-requested plan's executor dies."""

from __future__ import annotations

import asyncio
import io
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakewarden.api.table import Table
from lakewarden.events import Event, EventDecodeError, Undecodable, decode, encode, make_event
from lakewarden.settings import Settings
from lakewarden.table.bucket import append_group, route
from lakewarden.table.claim_mark import ClaimMark, claim_key
from lakewarden.table.config import META_FILE_NAME
from lakewarden.table.coordinator import Coordinator, EmbeddedCoordinator, Liveness
from lakewarden.table.files import BaseFileName, WriteToken, file_key
from lakewarden.table.instant import Transition
from lakewarden.table.merge import stamped
from lakewarden.table.stats import CommitStats, WorkloadProfile, WriteStat
from lakewarden.table.transaction import WriteTransaction
from lakewarden_services._common.dlq import DeadLetters
from lakewarden_services._common.loop_service import Consumed
from lakewarden_services.cancel_manager.handler import ExpiryHandler, RequestHandler
from lakewarden_services.cancel_manager.worker import CancelWorker

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string()), ("v", pa.string())])
COORDINATOR = EmbeddedCoordinator()


class FakeTopic:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes | None, Event]] = []

    async def send(self, *, key: bytes | None, value: Event) -> None:
        self.sent.append((key, value))


async def _inline(func: Callable[[], Any]) -> Any:
    return func()


class Harness:
    def __init__(self, coordinator: Coordinator = COORDINATOR) -> None:
        self.dlq = FakeTopic()
        self.results: list[Event] = []
        self.transitions: list[Event] = []
        letters = DeadLetters(self.dlq, service="cancel-manager", consumer_group="g")  # type: ignore[arg-type]
        self.worker = CancelWorker(Settings(), lambda: coordinator, retry_delay_s=0)
        self.registry: dict[str, Any] = {}  # the service's registry, shared by both handlers
        self.persisted: list[int] = []
        self.requests = RequestHandler(
            worker=self.worker,
            run_blocking=_inline,
            send_result=self._result,
            send_transition=self._transition,
            dead_letters=letters,
            producer_id="cancel-manager",
            registry=self.registry,
            persisted=self._persisted,
        )
        self.expiries = ExpiryHandler(
            worker=self.worker,
            run_blocking=_inline,
            send_transition=self._transition,
            dead_letters=letters,
            producer_id="cancel-manager",
            registry=self.registry,
        )
        self.offset = 0

    async def _persisted(self) -> None:
        # What the registry holds when the handler waits for it to be durable, and that no
        # result was sent before (a client told "accepted" can rely on the registration).
        self.persisted.append(len(self.results))

    async def _result(self, table_id: str, event: Event) -> None:
        self.results.append(event)

    async def _transition(self, table_id: str, event: Event) -> None:
        self.transitions.append(event)

    def feed(self, value: bytes, *, key: bytes | None, expiry: bool = False) -> None:
        message = Consumed("t", 0, self.offset, key, value, 0.0)
        self.offset += 1
        if not expiry:
            self.requests.lock_ahead(key)  # as the loop does, before decoding
        try:
            decoded: Any = decode(value)
        except EventDecodeError as err:
            decoded = Undecodable(err, value)
        handler = self.expiries if expiry else self.requests
        asyncio.run(handler.handle(message, decoded))

    def expire(self, table: Table, instant: str) -> None:
        """heartbeat-monitor's ``HeartbeatExpired`` of ``instant``'s executor, handled."""
        expired = make_event(
            "HeartbeatExpired",
            table_id=table.table_id,
            producer_id="heartbeat-monitor",
            instant=instant,
            owner="executor-9",
            last_seen_ms=0,
            detected_ms=0,
            tolerance_ms=30_000,
            frontier_ms=None,
        )
        self.feed(encode("HeartbeatExpired", expired), key=table.table_id.encode(), expiry=True)

    def ask(self, table: Table, instant: str, kind: str, *, uri: str | None = "same") -> Event:
        record = make_event(
            "CancelRequest",
            table_id=table.table_id,
            producer_id="test",
            request_id=f"r{self.offset}",
            instant=instant,
            kind=kind,
            requester="ops",
            reason="test",
            table_uri=table.uri if uri == "same" else uri,
        )
        self.feed(encode("CancelRequest", record), key=table.table_id.encode())
        return self.results[-1]


def fragmented(table: Table) -> None:
    """Three Spark-like append tasks: several slices per bucket."""
    txn = WriteTransaction.begin(
        table.timeline_log, table.coordinator, table.table_id, operation="insert", actor="t"
    )
    written = []
    for task in range(3):
        share = pa.table(
            {"id": [task * 10 + i for i in range(4)], "region": ["eu"] * 4, "v": ["x"] * 4},
            schema=SCHEMA,
        )
        for canonical, part in route(share, table.config).items():
            group = append_group(canonical, txn.instant, task)
            name = BaseFileName(group.file_id, WriteToken(task, 0, 0), txn.instant).render()
            key = file_key(group.partition_path, name)
            data = stamped(part, txn.instant, table.config, "insert")
            data = data.append_column(META_FILE_NAME, pa.repeat(pa.scalar(name), len(part)))
            buffer = io.BytesIO()
            pq.write_table(data.select(table.config.file_schema.names), buffer)
            table.storage.write_if_absent(key, buffer.getvalue())
            written.append(
                WriteStat(
                    file_group=group,
                    path=key,
                    base_instant=txn.instant,
                    num_records=len(part),
                    size_bytes=len(buffer.getvalue()),
                )
            )
    txn.inflight(
        WorkloadProfile(operation="insert", file_groups=tuple(w.file_group for w in written))
    )
    txn.complete(CommitStats(operation="insert", write_stats=tuple(written)))


def fragmented_table(root: Path, coordinator: Coordinator) -> Table:
    """A local table ``orders`` under ``root`` with several small slices per file group."""
    t = Table.create(
        str(root / "orders"),
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        buckets=2,
        coordinator=coordinator,
    )
    fragmented(t)
    return t


@pytest.fixture
def table(tmp_path: Path) -> Table:
    return fragmented_table(tmp_path, COORDINATOR)


def test_request_then_execute_are_answered_with_their_transitions(table: Table) -> None:
    h = Harness()
    instant = str(table.schedule_clustering(cancellable=True))
    result = h.ask(table, instant, "request")
    assert result.record["status"] == "accepted" and result.record["outcome"] == "cancel_requested"
    assert [e.record["transition"] for e in h.transitions] == ["cancel_requested"]
    assert h.ask(table, instant, "request").record["status"] == "already_requested"
    result = h.ask(table, instant, "execute", uri=None)  # the URI is remembered per table
    assert result.record["status"] == "aborted" and result.record["outcome"] == "aborted"
    assert h.transitions[-1].record["transition"] == "aborted"
    assert h.ask(table, instant, "execute").record["status"] == "already_aborted"
    assert h.dlq.sent == []


def test_refusals_are_clear_results_and_change_nothing(table: Table) -> None:
    h = Harness()
    fixed = str(table.schedule_clustering(cancellable=False))
    result = h.ask(table, fixed, "request")
    assert result.record["status"] == "not_cancellable"
    assert result.record["error_type"] == "PlanNotCancellableError"
    assert h.ask(table, "20990101000000000", "request").record["status"] == "unknown_instant"
    table.run_table_service(fixed)
    assert h.ask(table, fixed, "request").record["status"] == "refused_completed"
    other = Harness()
    assert other.ask(table, fixed, "request", uri=None).record["status"] == "unknown_table"
    assert h.transitions == []
    done = table.state().get(fixed)
    assert done is not None and done.state is Transition.COMPLETED


def test_execute_is_refused_while_the_executor_beats(table: Table) -> None:
    h = Harness()
    instant = str(table.schedule_clustering(cancellable=True))
    h.ask(table, instant, "request")
    with COORDINATOR.heartbeat(table.table_id, instant, "executor-9"):
        result = h.ask(table, instant, "execute")
    assert result.record["status"] == "refused_executing"
    assert "executor-9" in result.record["reason"]


def test_malformed_requests_go_to_the_dlq_and_the_handler_keeps_serving(table: Table) -> None:
    h = Harness()
    h.feed(b"not avro at all", key=table.table_id.encode())
    bad = make_event(
        "CancelRequest",
        table_id=table.table_id,
        producer_id="test",
        request_id="bad-1",
        instant="yesterday",
        kind="request",
        requester="ops",
        reason=None,
        table_uri=table.uri,
    )
    h.feed(encode("CancelRequest", bad), key=table.table_id.encode())
    h.feed(encode("CancelRequest", bad), key=b"another-table")
    assert [e.record["reason"] for _, e in h.dlq.sent] == [
        "bad_magic",
        "invalid_request",
        "key_mismatch",
    ]
    [refusal] = h.results  # the addressable invalid request is answered
    assert refusal.record["status"] == "invalid_request" and refusal.record["request_id"] == "bad-1"
    instant = str(table.schedule_clustering(cancellable=True))
    assert h.ask(table, instant, "request").record["status"] == "accepted"


def test_a_dead_executor_of_a_cancel_requested_plan_is_finished_by_the_service(
    table: Table,
) -> None:
    h = Harness()
    instant = str(table.schedule_clustering(cancellable=True))
    h.ask(table, instant, "request")
    h.expire(table, instant)
    mine = table.state().get(instant)
    assert mine is not None and mine.state is Transition.ABORTED
    assert h.transitions[-1].record["transition"] == "aborted"


class LaggingLiveness(EmbeddedCoordinator):
    """heartbeat-monitor's order: the ``HeartbeatExpired`` is on the broker before its "dead"
    record is in the liveness changelog, so the first ``lagging`` answers still say ALIVE."""

    def __init__(self, lagging: int) -> None:
        super().__init__()
        self.lagging = lagging

    def liveness(self, table_id: str, instant: str) -> Liveness:
        if self.lagging > 0:
            self.lagging -= 1
            return Liveness.ALIVE
        return super().liveness(table_id, instant)


@pytest.mark.parametrize("lagging", [1, 2])
def test_an_expiry_ahead_of_the_liveness_record_still_finishes_the_plan(
    tmp_path: Path, lagging: int
) -> None:
    coordinator = LaggingLiveness(lagging=0)
    table = fragmented_table(tmp_path, coordinator)
    h = Harness(coordinator)
    instant = str(table.schedule_clustering(cancellable=True))
    h.ask(table, instant, "request")
    coordinator.lagging = lagging  # fewer than the worker's attempts (3)
    h.expire(table, instant)
    mine = table.state().get(instant)
    assert mine is not None and mine.state is Transition.ABORTED
    assert coordinator.lagging == 0


def test_an_executor_that_stays_alive_is_refused_after_the_retries(tmp_path: Path) -> None:
    coordinator = LaggingLiveness(lagging=0)
    table = fragmented_table(tmp_path, coordinator)
    h = Harness(coordinator)
    instant = str(table.schedule_clustering(cancellable=True))
    h.ask(table, instant, "request")
    coordinator.lagging = 100  # a new executor took the plan over: really alive
    h.expire(table, instant)
    mine = table.state().get(instant)
    assert mine is not None and mine.state is Transition.CANCEL_REQUESTED
    assert coordinator.lagging == 100 - h.worker.attempts


def test_a_table_found_at_its_uri_is_registered_durably_before_the_result(table: Table) -> None:
    h = Harness()
    instant = str(table.schedule_clustering(cancellable=True))
    h.ask(table, instant, "request", uri=str(table.uri) + "-nowhere")
    assert h.results[-1].record["status"] == "unknown_table"
    assert h.registry == {} and h.persisted == []  # a wrong URI is not remembered
    h.ask(table, instant, "request")
    assert h.registry == {table.table_id: table.uri}
    assert h.persisted == [1]  # waited for before the second result was sent
    h.ask(table, instant, "request")
    assert h.persisted == [1]  # known already: nothing to write


def test_an_expiry_after_a_restart_finds_the_table_in_the_recovered_registry(
    table: Table,
) -> None:
    """A new process (a restart, or the partition's next owner) has an empty worker, but the
    registry recovered from the changelog still says where the table is."""
    before = Harness()
    instant = str(table.schedule_clustering(cancellable=True))
    before.ask(table, instant, "request")
    after = Harness()
    after.registry.update(before.registry)  # what the loop recovers from the changelog
    after.expire(table, instant)
    mine = table.state().get(instant)
    assert mine is not None and mine.state is Transition.ABORTED


def test_the_worker_keeps_opened_tables_and_reopens_a_replaced_one(
    table: Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = Harness()
    opened: list[str] = []
    real_open = Table.open

    def counting_open(uri: str, **kwargs: Any) -> Table:
        opened.append(uri)
        return real_open(uri, **kwargs)

    monkeypatch.setattr(Table, "open", counting_open)
    first = str(table.schedule_clustering(cancellable=True))
    assert h.ask(table, first, "request").record["status"] == "accepted"
    assert h.ask(table, first, "execute").record["status"] == "aborted"
    # Entries appended by others meanwhile are seen: the kept table reloads its timeline.
    second = str(table.schedule_clustering(cancellable=True))
    assert h.ask(table, second, "request").record["status"] == "accepted"
    assert opened == [table.uri]
    # Another table at the same URI (dropped and recreated): opened afresh, not refused.
    shutil.rmtree(tmp_path / "orders")
    replaced = Table.create(
        table.uri,
        name="orders",
        record_key="id",
        schema=SCHEMA,
        partition_by=["region"],
        buckets=2,
        coordinator=COORDINATOR,
    )
    fragmented(replaced)
    third = str(replaced.schedule_clustering(cancellable=True))
    assert h.ask(replaced, third, "request").record["status"] == "accepted"
    assert opened == [table.uri, table.uri]


class MonitorDown(EmbeddedCoordinator):
    """A service whose heartbeat-monitor is down: it monitors, but has no verdict."""

    def monitors_liveness(self) -> bool:
        return True


def test_with_no_liveness_verdict_execute_waits_then_refuses_saying_why(tmp_path: Path) -> None:
    coordinator = MonitorDown()
    table = fragmented_table(tmp_path, coordinator)
    h = Harness(coordinator)
    instant = str(table.schedule_clustering(cancellable=True))
    # An executor of another process claimed the plan long ago; nobody has a verdict on it.
    table.storage.write(claim_key(instant), ClaimMark("executor-9", 0, 30_000).encode())
    h.ask(table, instant, "request")
    result = h.ask(table, instant, "execute")
    assert result.record["status"] == "refused_liveness_unknown"
    assert result.record["error_type"] == "LivenessUnknownError"
    assert "heartbeat-monitor has no verdict on executor-9" in result.record["reason"]
    mine = table.state().get(instant)
    assert mine is not None and mine.state is Transition.CANCEL_REQUESTED
    h.expire(table, instant)  # heartbeat-monitor's expiry record: positive knowledge
    mine = table.state().get(instant)
    assert mine is not None and mine.state is Transition.ABORTED
