"""The cleaner service on the real broker: bad events to the DLQ, a killed writer rolled back
after its heartbeat expired, a dead job's pending S3 uploads aborted, a cleaner killed in the
middle of a clean finishing the same plan, and two then three cleaners over 30 tables with one
killed: every table cleaned, never two cleans of one table at once (from the timelines and
from the lock history read back from Kafka); a table written through a Kafka coordinator and
never registered by hand is cleaned all the same."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest
from _job_committers import JobCommitters
from confluent_kafka import Consumer

from lakewarden.clients import request_clean
from lakewarden.commit import ManifestCommitter, new_job_id
from lakewarden.events import EventProducer, decode, make_event
from lakewarden.events.topics import (
    CLEAN_REQUESTS,
    DLQ,
    HEARTBEAT_EXPIRED,
    LOCK_REPLIES,
    LOCK_REQUESTS,
)
from lakewarden.history import LockGrant, build_history, read_table_events
from lakewarden.settings import Settings
from lakewarden.table import (
    Action,
    CleanPolicy,
    EmbeddedCoordinator,
    Table,
    Transition,
    close_shared_connections,
)
from lakewarden.table.plans import JobPlan
from lakewarden.table.transaction import WriteTransaction
from lakewarden.testing import wait_until
from lakewarden_services._common.process import ServiceProcess

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
KEEP_ONE = CleanPolicy(commits_retained=1, retention_window_s=0)  # deletes at once
Cleaners = Callable[..., ServiceProcess]


def make_table(uri: str, versions: int, settings: Settings | None = None) -> Table:
    table = Table.create(
        uri,
        name="t",
        record_key="id",
        schema=SCHEMA,
        clean_policy=KEEP_ONE,
        coordinator=EmbeddedCoordinator(),
        settings=settings,
    )
    write(table, versions)
    return table


def write(table: Table, versions: int) -> None:
    for v in range(versions):
        table.write(pa.Table.from_pylist([{"id": 1, "v": str(v)}], schema=SCHEMA))


def data_files(table: Table) -> set[str]:
    return {
        o.key
        for o in table.storage.list("")
        if not o.key.startswith((".lakewarden/", "_temporary/"))
    }


def cleaned(table: Table) -> bool:
    """Only the latest snapshot's files are left and no clean is pending."""
    state = table.state()
    latest = {p for s in table.snapshot().slices.values() for p in s.paths}
    pending = [i for i in state.pending() if i.action is Action.CLEAN]
    return not pending and data_files(table) == latest


def clean_instants(table: Table) -> list[str]:
    return [i.instant for i in table.timeline() if i.action is Action.CLEAN]


def assert_one_clean_at_a_time(table: Table) -> None:
    pending: set[str] = set()
    for entry in table.timeline_log.entries():
        if entry.action is not Action.CLEAN:
            continue
        if entry.transition is Transition.REQUESTED:
            assert not pending, f"clean {entry.instant} planned while {pending} was pending"
            pending.add(entry.instant)
        else:
            pending.discard(entry.instant)


def lock_histories(settings: Settings, tables: Sequence[Table]) -> list[tuple[LockGrant, ...]]:
    """Each table's lock grants, folded from the lock requests and replies read back from
    Kafka (the reads run side by side: each is a bounded read of two topics)."""

    def grants(table: Table) -> tuple[LockGrant, ...]:
        events = read_table_events(
            settings, table.table_id, topics=(LOCK_REQUESTS, LOCK_REPLIES), timeout_s=60
        )
        return build_history(table.table_id, events).locks

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(grants, tables))


def clean_plan_tokens(table: Table) -> set[int | None]:
    """The lock tokens the table's clean plans were appended under."""
    return {
        e.lock_token
        for e in table.timeline_log.entries()
        if e.action is Action.CLEAN and e.transition is Transition.REQUESTED
    }


def assert_lock_holds_never_overlap(
    table: Table, grants: tuple[LockGrant, ...], *, granted_up_to: int
) -> None:
    """Every lease timeline-lock granted on the table, up to token ``granted_up_to``, began
    only after the one before it ended (released, withdrawn or expired).

    ``grants`` must come from a read begun after the read that saw ``granted_up_to`` ended:
    a read's cut may show a grant whose cause (the release or expiry before it, on the other
    topic) lies just past the cut, while the cleaners keep sweeping; a later read holds it."""
    held = sorted((g for g in grants if g.token is not None), key=lambda g: g.token or 0)
    for before, after in zip(held, held[1:], strict=False):
        if (after.token or 0) > granted_up_to:
            break
        ends = [t for t in (before.released_ms, before.expired_ms) if t is not None]
        assert ends, (
            f"{table.uri}: lease {before.token} never ended, yet {after.token} was granted; "
            f"the table's lock history: {held}"  # every grant, to tell a cut from a bug
        )
        assert after.granted_ms is not None and min(ends) <= after.granted_ms, (
            f"{table.uri}: lease {after.token} ({after.owner}) granted at {after.granted_ms} "
            f"while lease {before.token} ({before.owner}) was held until {min(ends)}"
        )


def last_token(grants: tuple[LockGrant, ...]) -> int:
    return max((g.token for g in grants if g.token is not None), default=0)


def ask(settings: Settings, table: Table, producer: EventProducer | None = None) -> None:
    request_clean(settings, table_id=table.table_id, table_uri=table.uri, producer=producer)


@pytest.fixture
def dlq(cl_settings: Settings) -> Iterator[Callable[[], list[str]]]:
    consumer = Consumer(
        {
            "bootstrap.servers": cl_settings.kafka.bootstrap_servers,
            "group.id": f"dlq-reader-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([DLQ.name(cl_settings)])
    reasons: list[str] = []

    def read() -> list[str]:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            reasons.append(decode(message.value()).record["reason"])
        return reasons

    yield read
    consumer.close()


def test_bad_events_go_to_the_dlq_and_the_service_keeps_serving(
    cl_settings: Settings, cleaners: Cleaners, dlq: Callable[[], list[str]], tmp_path: Path
) -> None:
    cleaners("a")
    producer = EventProducer(cl_settings, producer_id="test")
    topic = CLEAN_REQUESTS.name(cl_settings)
    producer.produce_bytes(topic, b"\xc3\x01 not an event at all", key=b"t1")
    record = make_event(
        "CleanRequest", table_id="t2", producer_id="test", table_uri="", requested_by="test"
    )
    producer.send("CleanRequest", record)
    producer.flush()
    table = make_table(str(tmp_path / "t"), 3)
    ask(cl_settings, table, producer)
    wait_until(lambda: cleaned(table), 60, "the valid request's table to be cleaned")
    wait_until(lambda: len(dlq()) >= 2, 30, "two dead letters")
    assert sorted(dlq()) == ["invalid_request", "unknown_fingerprint"]


def test_killed_writer_is_rolled_back_after_its_heartbeat_expires(
    cl_settings: Settings, cleaners: Cleaners, tmp_path: Path
) -> None:
    cleaners("a")
    table = make_table(str(tmp_path / "t"), 1)
    ask(cl_settings, table)  # registers the table with its owner
    env = {
        **os.environ,
        "LAKEWARDEN_KAFKA__BOOTSTRAP_SERVERS": cl_settings.kafka.bootstrap_servers or "",
        "LAKEWARDEN_KAFKA__TOPIC_PREFIX": cl_settings.kafka.topic_prefix,
        "LAKEWARDEN_HEARTBEAT__INTERVAL_S": "0.2",
        "LAKEWARDEN_HEARTBEAT__TOLERABLE_MISSES": "3",
        "LAKEWARDEN_STATE_DIR": str(tmp_path / "writer-state"),
    }
    writer = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("_writer.py")), table.uri],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        _, instant, key = writer.stdout.readline().split()
        assert table.storage.exists(key)
    finally:
        writer.kill()  # kill -9: no heartbeat block ends, no rollback of its own
        writer.wait()
        if writer.stdout is not None:
            writer.stdout.close()

    def rolled_back() -> bool:
        target = table.state().get(instant)
        return target is not None and target.state is Transition.ROLLED_BACK

    wait_until(rolled_back, 60, "the killed writer's instant to be rolled back")
    wait_until(lambda: not table.storage.exists(key), 30, "its file to be deleted")
    target = table.state().get(instant)
    assert target is not None and target.rollback_by is not None
    assert target.failed_stage == "cleaner_rollback"


def test_dead_jobs_pending_s3_uploads_are_aborted(
    cl_settings: Settings, cleaners: Cleaners, s3_bucket: str, tmp_path: Path
) -> None:
    cleaners("a")
    uri = f"s3://{s3_bucket}/{tmp_path.name}/t"
    table = make_table(uri, 1, cl_settings)
    ask(cl_settings, table)
    job = ManifestCommitter(table.storage, new_job_id())
    txn = WriteTransaction.begin(
        table.timeline_log,
        table.coordinator,
        table.table_id,
        operation="upsert",
        actor="dead-driver",
        plan=JobPlan(job_id=job.job_id),
    )
    job.setup_job()
    attempt = job.task_attempt(0)
    attempt.setup()
    attempt.write_file("p=1/f_0-0-0_" + txn.instant + ".parquet", b"x" * 1024)
    assert list(table.storage.list_multipart_uploads("p=1/"))  # pending, held back
    # heartbeat-monitor's verdict on the driver (which never beat): it is dead.
    expired = make_event(
        "HeartbeatExpired",
        table_id=table.table_id,
        producer_id="test",
        instant=txn.instant,
        owner="dead-driver",
        last_seen_ms=0,
        detected_ms=0,
    )
    producer = EventProducer(cl_settings, producer_id="test")
    producer.send("HeartbeatExpired", expired, topic=HEARTBEAT_EXPIRED)
    producer.flush()
    wait_until(
        lambda: not list(table.storage.list_multipart_uploads("p=1/")),
        60,
        "the dead job's pending upload to be aborted",
    )
    state = table.state().get(txn.instant)
    assert state is not None and state.state is Transition.ROLLED_BACK
    wait_until(lambda: not any(table.storage.list("_temporary/")), 30, "its job directory gone")


def test_cleaner_killed_mid_clean_finishes_the_same_plan(
    cl_settings: Settings, cleaners: Cleaners, tmp_path: Path
) -> None:
    cleaner = cleaners("a", slow=True)
    table = make_table(str(tmp_path / "t"), 16)  # 15 files to delete, 2 s each (in parallel)
    ask(cl_settings, table)
    wait_until(lambda: clean_instants(table), 60, "a clean to be planned")
    cleaner.kill()
    (instant,) = clean_instants(table)
    planned = table.state().get(instant)
    assert planned is not None and planned.state is Transition.REQUESTED
    assert len(data_files(table)) > 1  # killed after planning, before its deletes were done
    cleaners("a")  # restarted (deleting at full speed): its sweep resumes the pending clean
    wait_until(lambda: cleaned(table), 60, "the interrupted clean to finish")
    assert clean_instants(table) == [instant]  # the same plan, never re-planned
    done = table.state().get(instant)
    assert done is not None and done.state is Transition.COMPLETED and done.plan == planned.plan


def test_two_then_three_cleaners_over_30_tables_one_killed(
    cl_settings: Settings, cleaners: Cleaners, tmp_path: Path
) -> None:
    cleaners("a")
    second = cleaners("b")
    tables = [make_table(str(tmp_path / f"t{i}"), 3) for i in range(30)]
    producer = EventProducer(cl_settings, producer_id="test")
    for table in tables:
        ask(cl_settings, table, producer)
    cleaners("c")  # a third instance joins while the first cleans run
    second.kill()  # and one leaves, mid-run
    for table in tables:
        write(table, 1)  # more garbage after the rebalance: only the sweeps see it
    for table in tables:
        wait_until(lambda t=table: cleaned(t), 120, f"table {table.uri} to be cleaned")
    for table in tables:
        assert_one_clean_at_a_time(table)
        assert clean_instants(table)
    # In causal order while the sweeps go on: the plans, then the grants they were made
    # under (a first read), then everything that caused those grants (a second read).
    plans = [clean_plan_tokens(table) for table in tables]
    seen = lock_histories(cl_settings, tables)
    later = lock_histories(cl_settings, tables)
    for table, planned_under, shown, grants in zip(tables, plans, seen, later, strict=True):
        assert_lock_holds_never_overlap(table, grants, granted_up_to=last_token(shown))
        assert planned_under, f"{table.uri}: no clean was planned"
        assert planned_under <= {g.token for g in shown if g.token is not None}, (
            f"{table.uri}: clean plans under tokens {planned_under}, "
            f"the lock history granted {sorted(g.token for g in shown if g.token is not None)}"
        )


def test_a_table_written_through_kafka_is_cleaned_without_being_registered_by_hand(
    cl_settings: Settings, cleaners: Cleaners, job_committer: JobCommitters, tmp_path: Path
) -> None:
    cleaners("a")
    job_committer.ensure(cl_settings)  # the writes below commit through it (the default)
    # No coordinator given: the shared one for these settings, timeline-lock's. Its first
    # announced entry registers the table with the cleaner (nobody calls request_clean).
    try:
        table = Table.create(
            str(tmp_path / "t"),
            name="t",
            record_key="id",
            schema=SCHEMA,
            clean_policy=KEEP_ONE,
            settings=cl_settings,
        )
        write(table, 3)
        wait_until(lambda: cleaned(table), 60, "the unregistered table to be cleaned")
        assert clean_instants(table)
    finally:
        close_shared_connections()  # its Kafka clients, before the session's broker stops
