"""Two real cleaner processes (``python -m lakewarden_services.cleaner``, one consumer group)
over a lake of 120 tables on the real broker, with timeline-lock and heartbeat-monitor; one
instance is killed with SIGKILL in the middle of a clean and restarted. Then every table is
cleaned exactly as its own policy says (the files left are those the policy keeps, no more, no
fewer), no table was ever cleaned twice at once (no two clean instants of a table overlap in
its timeline, every clean was planned under a lease timeline-lock granted, and no two leases of
a table overlap), the interrupted clean was finished as planned, and no table was forgotten:
garbage written after the churn, which only the owners' sweeps can find, is cleaned in every
table."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest
from _lake_services import Instances, instance_factory
from confluent_kafka import Consumer, TopicPartition

from lakewarden.clients import request_clean
from lakewarden.events import EventProducer
from lakewarden.events.topics import CLEAN_REQUESTS, LOCK_REPLIES, LOCK_REQUESTS
from lakewarden.history import LockGrant, build_history, read_table_events
from lakewarden.settings import Settings
from lakewarden.table import Action, CleanPolicy, EmbeddedCoordinator, Table, Transition
from lakewarden.table.clean.policy import CleaningPolicy
from lakewarden.table.timeline_state import TimelineEntry
from lakewarden.testing import wait_until
from lakewarden_services._common.process import ServiceProcess

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(900)]

TABLES = 120
FIRST_WRITES = 5
CHURN_WRITES = 2
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
# Three policies across the lake; a retention window of 0 lets a clean delete at once.
POLICIES = (
    CleanPolicy(commits_retained=1, retention_window_s=0),
    CleanPolicy(commits_retained=2, retention_window_s=0),
    CleanPolicy(
        policy=CleaningPolicy.KEEP_LATEST_FILE_VERSIONS,
        file_versions_retained=3,
        retention_window_s=0,
    ),
)
CLEANER_ENV = {
    "LAKEWARDEN_CLEANER_SWEEP_INTERVAL_S": "1",
    # Every delete takes 0.5 s: a clean is in progress long enough to be killed in.
    "LAKEWARDEN_CLEANER_DELETE_DELAY_S": "0.5",
}


@pytest.fixture(scope="module")
def cleaners(
    lake_settings: Settings,
    coordination: list[ServiceProcess],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Instances]:
    get, started = instance_factory(
        "lakewarden_services.cleaner", lake_settings, tmp_path_factory, CLEANER_ENV
    )
    yield get
    for process in started.values():
        process.kill()


def write(table: Table, versions: int) -> None:
    """``versions`` commits, each a new version of the table's one file group."""
    for v in range(versions):
        table.write(pa.Table.from_pylist([{"id": 1, "v": str(v)}], schema=SCHEMA))


def make_table(root: Path, i: int) -> Table:
    table = Table.create(
        str(root / f"t{i:03d}"),
        name=f"t{i:03d}",
        record_key="id",
        schema=SCHEMA,
        clean_policy=POLICIES[i % len(POLICIES)],
        coordinator=EmbeddedCoordinator(),
    )
    write(table, FIRST_WRITES)
    return table


def data_files(table: Table) -> set[str]:
    return {
        o.key
        for o in table.storage.list("")
        if not o.key.startswith((".lakewarden/", "_temporary/"))
    }


def kept_by_policy(table: Table) -> set[str]:
    """The files the table's policy keeps: every commit writes a new version of the one file
    group, so keeping the latest N commits or N file versions keeps the files of the last N
    commits."""
    retained = int(table.config.clean_policy.retained)
    commits = [i.instant for i in table.timeline() if i.action is not Action.CLEAN]
    last = set(commits[-retained:])
    return {f for f in data_files(table) if f.rsplit("_", 1)[-1].removesuffix(".parquet") in last}


def clean_entries(table: Table) -> list[TimelineEntry]:
    return [e for e in table.timeline_log.entries() if e.action is Action.CLEAN]


def pending_cleans(table: Table) -> dict[str, TimelineEntry]:
    """The requested clean entries with no completion yet, by instant."""
    pending: dict[str, TimelineEntry] = {}
    for entry in clean_entries(table):
        if entry.transition is Transition.REQUESTED:
            pending[entry.instant] = entry
        else:
            pending.pop(entry.instant, None)
    return pending


def cleaned_since(table: Table, since_ms: int) -> bool:
    """A clean planned after ``since_ms`` completed, none is pending, and exactly the files
    the policy keeps are left."""
    entries = clean_entries(table)
    completed = {e.instant for e in entries if e.transition is Transition.COMPLETED}
    late = {
        e.instant
        for e in entries
        if e.transition is Transition.REQUESTED and e.wall_time_ms > since_ms
    }
    return (
        bool(late & completed)
        and not pending_cleans(table)
        and data_files(table) == kept_by_policy(table)
    )


def assert_cleans_never_overlap(table: Table) -> None:
    """In the timeline, each clean completed before the next was planned."""
    open_clean: str | None = None
    for entry in clean_entries(table):
        if entry.transition is Transition.REQUESTED:
            assert open_clean is None, (
                f"{table.uri}: clean {entry.instant} planned while clean {open_clean} was pending"
            )
            open_clean = entry.instant
        elif entry.transition is Transition.COMPLETED:
            assert entry.instant == open_clean, f"{table.uri}: {entry.instant} completed unplanned"
            open_clean = None
    assert open_clean is None


def assert_cleaned_by_its_policy(table: Table) -> None:
    policy = table.config.clean_policy.describe()
    for entry in clean_entries(table):
        if entry.transition is Transition.COMPLETED:
            assert entry.payload["clean"]["policy"] == policy, (table.uri, entry.payload)
    assert data_files(table) == kept_by_policy(table)
    assert len(data_files(table)) == int(table.config.clean_policy.retained)


def lock_grants(settings: Settings, tables: list[Table]) -> list[tuple[LockGrant, ...]]:
    """Each table's lease history folded from the lock requests and replies read back from
    Kafka (reads side by side: each is a bounded read of two topics)."""

    def grants(table: Table) -> tuple[LockGrant, ...]:
        events = read_table_events(
            settings, table.table_id, topics=(LOCK_REQUESTS, LOCK_REPLIES), timeout_s=60
        )
        return build_history(table.table_id, events).locks

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(grants, tables))


def assert_cleans_fenced_by_the_lock(table: Table, grants: tuple[LockGrant, ...]) -> None:
    """No two leases of the table overlap, and every clean was planned under one of them."""
    held = sorted((g for g in grants if g.token is not None), key=lambda g: g.token or 0)
    for before, after in zip(held, held[1:], strict=False):
        ends = [t for t in (before.released_ms, before.expired_ms) if t is not None]
        assert ends and after.granted_ms is not None and min(ends) <= after.granted_ms, (
            f"{table.uri}: lease {after.token} ({after.owner}) granted while lease "
            f"{before.token} ({before.owner}) was held"
        )
    planned_under = {
        e.lock_token for e in clean_entries(table) if e.transition is Transition.REQUESTED
    }
    assert planned_under and planned_under <= {g.token for g in held}, (
        f"{table.uri}: cleans planned under {planned_under}, leases {[g.token for g in held]}"
    )


def where_in_kafka(settings: Settings, table_ids: list[str]) -> dict[str, object]:
    """For a failure message: the clean.requests and registry changelog records of
    ``table_ids`` (topic, partition, offset, timestamp) and the group's committed offsets."""
    prefix = settings.kafka.topic_prefix
    topics = [CLEAN_REQUESTS.name(settings), f"{prefix}cleaner-tables-changelog"]
    consumer = Consumer(
        settings.kafka.librdkafka_config(group_id=f"{prefix}cleaner", enable_auto_commit=False)
    )
    found: dict[str, object] = {"committed": {}}
    try:
        parts = [TopicPartition(topics[0], p) for p in range(CLEAN_REQUESTS.partitions)]
        found["committed"] = {
            tp.partition: tp.offset for tp in consumer.committed(parts, timeout=10)
        }
        for topic in topics:
            for p in range(CLEAN_REQUESTS.partitions):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                consumer.assign([TopicPartition(topic, p, low)])
                offset = low
                while offset < high:
                    message = consumer.poll(5)
                    if message is None:
                        break
                    offset = message.offset() + 1
                    key = (message.key() or b"").decode(errors="replace")
                    for table_id in table_ids:
                        if table_id in key:
                            where = (topic, p, message.offset(), message.timestamp()[1])
                            found.setdefault(table_id, []).append(where)  # type: ignore[union-attr]
    finally:
        consumer.close()
    return found


def interrupted_clean(tables: list[Table], actor: str) -> tuple[Table, str] | None:
    for table in tables:
        for instant, entry in pending_cleans(table).items():
            if entry.actor == actor:
                return table, instant
    return None


def test_two_cleaners_one_killed_and_restarted_clean_every_table_by_its_policy(
    lake_settings: Settings, cleaners: Instances, tmp_path: Path
) -> None:
    with ThreadPoolExecutor(4) as pool:
        tables = list(pool.map(lambda i: make_table(tmp_path, i), range(TABLES)))
    cleaners("a")
    victim = cleaners("b")
    producer = EventProducer(lake_settings, producer_id="lake-test")
    for table in tables:
        request_clean(
            lake_settings, table_id=table.table_id, table_uri=table.uri, producer=producer
        )

    # SIGKILL b while one of its cleans is planned and not finished.
    found: list[tuple[Table, str]] = []

    def b_is_cleaning() -> bool:
        hit = interrupted_clean(tables, "cleaner-b")
        if hit is not None:
            found.append(hit)
        return hit is not None

    wait_until(b_is_cleaning, 180, "cleaner b to be in the middle of a clean")
    victim.kill()
    churn_ms = int(time.time() * 1000)
    interrupted_table, interrupted = found[0]
    assert interrupted in pending_cleans(interrupted_table)
    cleaners("b")  # restarted: same instance id, so it takes its partitions back

    # Garbage only the owners' sweeps can find (embedded writes announce nothing on Kafka).
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda t: write(t, CHURN_WRITES), tables))
    laggards: list[str] = []

    def every_table_cleaned() -> bool:
        laggards[:] = [t.uri for t in tables if not cleaned_since(t, churn_ms)]
        return not laggards

    try:
        wait_until(every_table_cleaned, 300, "every table to be cleaned again after the churn")
    except AssertionError as err:
        lost = [t.table_id for t in tables if t.uri in laggards]
        raise AssertionError(
            f"{err}: {len(laggards)} tables forgotten, {laggards[:10]}; where Kafka has them: "
            f"{where_in_kafka(lake_settings, lost[:10])}"
        ) from None

    done = interrupted_table.state().get(interrupted)
    assert done is not None and done.state is Transition.COMPLETED  # finished as planned
    actors = set()
    for table in tables:
        assert_cleans_never_overlap(table)
        assert_cleaned_by_its_policy(table)
        actors |= {e.actor for e in clean_entries(table)}
    assert actors == {"cleaner-a", "cleaner-b"}  # the lake was split between the two
    for table, grants in zip(tables, lock_grants(lake_settings, tables), strict=True):
        assert_cleans_fenced_by_the_lock(table, grants)
