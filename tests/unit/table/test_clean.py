"""Table.clean: the three policies with time travel inside and outside retention, invariant 6
(pending instants and plans), resumability, rollback of failed writes, job leftovers and
orphans. In-memory and local stores, an injected wall clock."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pytest
from _memstore import MemStorage

import lakewarden
from lakewarden.storage.faults import FaultyStorage, InjectedFaultError
from lakewarden.table import (
    Action,
    CleaningPolicy,
    CleanPolicy,
    InstantCleanedError,
    InvalidCleanPolicyError,
    Table,
    TableConfig,
    Transition,
)
from lakewarden.table.clean.retention import file_lives
from lakewarden.table.clean.rollback import NEVER_BEAT_TOLERANCES
from lakewarden.table.config import save_new_config
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.table.files import BaseFileName, WriteToken, file_key
from lakewarden.table.instant import Instant
from lakewarden.table.plans import ServicePlan
from lakewarden.table.stats import CommitStats, FileGroupId, WorkloadProfile, WriteStat
from lakewarden.table.timeline_state import InstantState
from lakewarden.table.transaction import WriteTransaction
from lakewarden.testing import ManualClock

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
HOUR = 3600.0


def batch(version: str, ids: range = range(4)) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "v": version} for i in ids], schema=SCHEMA)


def mem_table(storage: MemStorage | FaultyStorage | None = None, **config: object) -> Table:
    store = storage if storage is not None else MemStorage()
    options: dict[str, object] = {"schema": SCHEMA, **config}
    table_config = TableConfig.new(name="t", record_key="id", **options)  # type: ignore[arg-type]
    save_new_config(store, table_config)
    return Table(store, table_config, coordinator=EmbeddedCoordinator())


def data_keys(table: Table) -> set[str]:
    return {
        o.key
        for o in table.storage.list("")
        if not o.key.startswith((".lakewarden/", "_temporary/"))
    }


def versions(table: Table, n: int) -> list[str]:
    return [table.write(batch(f"v{i}")).instant for i in range(n)]


def values(table: Table, as_of: str | None = None) -> set[str]:
    return set(table.read(as_of=as_of).column("v").to_pylist())


# -- policies --------------------------------------------------------------------------------


def test_keep_latest_commits_time_travel_inside_and_outside() -> None:
    table = mem_table()
    instants = versions(table, 5)
    before = data_keys(table)
    result = table.clean(CleanPolicy(commits_retained=2, retention_window_s=0))

    assert result.instant is not None and len(result.files) == 3
    assert result.files_deleted == 3 and result.bytes_deleted == result.planned_bytes > 0
    assert all("outside keep-latest-commits=2" in f.reason for f in result.files)
    assert data_keys(table) == before - {f.path for f in result.files}
    assert result.earliest_retained_instant == instants[3]
    assert values(table, instants[3]) == {"v3"} and values(table) == {"v4"}
    with pytest.raises(InstantCleanedError) as err:
        table.read(as_of=instants[1])
    assert err.value.policy == "keep-latest-commits=2"
    assert err.value.earliest_retained_instant == instants[3]
    assert "keep-latest-commits=2" in str(err.value) and instants[3] in str(err.value)
    clean = table.state().get(result.instant)
    assert clean is not None and clean.state is Transition.COMPLETED
    assert clean.commit is not None and clean.commit.extra_metadata["files_deleted"] == "3"
    # Nothing left to do: a second clean appends nothing.
    tail = table.state().tail_seq
    again = table.clean(CleanPolicy(commits_retained=2, retention_window_s=0))
    assert again.instant is None and again.files == () and table.state().tail_seq == tail


def test_keep_latest_file_versions() -> None:
    table = mem_table()
    instants = versions(table, 4)
    policy = CleanPolicy(
        policy=CleaningPolicy.KEEP_LATEST_FILE_VERSIONS,
        file_versions_retained=2,
        retention_window_s=0,
    )
    result = table.clean(policy)
    assert len(result.files) == 2
    assert all("outside keep-latest-file-versions=2" in f.reason for f in result.files)
    assert values(table, instants[2]) == {"v2"}
    with pytest.raises(InstantCleanedError):
        table.read(as_of=instants[1])


def test_keep_latest_by_hours_inside_and_outside_the_window() -> None:
    table = mem_table(clean_policy=CleanPolicy(policy=CleaningPolicy.KEEP_LATEST_BY_HOURS))
    instants = versions(table, 3)
    clock = ManualClock(start=time.time())
    inside = table.clean(wall_clock=clock.monotonic)  # the table's policy: 24 hours
    assert inside.instant is None and inside.files == ()
    assert values(table, instants[0]) == {"v0"}
    clock.advance(25 * HOUR)
    outside = table.clean(wall_clock=clock.monotonic)
    assert len(outside.files) == 2
    assert all("outside keep-latest-by-hours=24" in f.reason for f in outside.files)
    assert values(table) == {"v2"}
    with pytest.raises(InstantCleanedError):
        table.read(as_of=instants[1])


def test_policy_in_table_json_and_overridden(tmp_path: Path) -> None:
    policy = CleanPolicy(commits_retained=4, retention_window_s=0)
    table = Table.create(
        str(tmp_path / "t"), name="t", record_key="id", schema=SCHEMA, clean_policy=policy
    )
    raw = json.loads((tmp_path / "t/.lakewarden/table.json").read_text())
    assert raw["clean_policy"]["policy"] == "keep_latest_commits"
    assert raw["clean_policy"]["commits_retained"] == 4
    assert Table.open(table.uri).config.clean_policy == policy
    versions(table, 4)
    assert table.clean(dry_run=True).files == ()  # 4 retained
    override = table.clean("keep-latest-commits=1", dry_run=True)
    assert len(override.files) == 3 and override.instant is None
    assert len(data_keys(table)) == 4  # dry run deletes nothing
    first = table.timeline()[0].instant
    table.clean("keep-latest-commits=1")
    with pytest.raises(InstantCleanedError, match="keep-latest-commits=1"):
        lakewarden.read(table.uri, as_of=first)  # never a FileNotFoundError


def test_old_table_json_cleans_with_the_defaults() -> None:
    raw = json.loads(TableConfig.new(name="t", record_key="id", schema=SCHEMA).to_json())
    del raw["clean_policy"]
    assert TableConfig.model_validate(raw).clean_policy == CleanPolicy()
    assert CleanPolicy().describe() == "keep-latest-commits=10"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("keep-latest-commits=5", CleanPolicy(commits_retained=5)),
        (
            "keep_latest_file_versions=2",
            CleanPolicy(policy=CleaningPolicy.KEEP_LATEST_FILE_VERSIONS, file_versions_retained=2),
        ),
        ("keep-latest-by-hours", CleanPolicy(policy=CleaningPolicy.KEEP_LATEST_BY_HOURS)),
    ],
)
def test_policy_parse(text: str, expected: CleanPolicy) -> None:
    assert CleanPolicy.parse(text) == expected


@pytest.mark.parametrize(
    "text", ["keep-everything=3", "keep-latest-commits=0", "keep-latest-commits=x"]
)
def test_policy_parse_rejects(text: str) -> None:
    with pytest.raises(InvalidCleanPolicyError, match="Help:"):
        CleanPolicy.parse(text)


# -- invariant 6 -----------------------------------------------------------------------------


def test_pending_clustering_plan_files_survive() -> None:
    regional = pa.schema([*SCHEMA, pa.field("region", pa.string())])
    table = mem_table(schema=regional, partition_by=["region"])

    def put(region: str, version: str) -> str:
        rows = [{"id": 1, "v": version, "region": region}]
        return table.write(pa.Table.from_pylist(rows, schema=regional)).instant

    first = put("a", "a0")
    put("a", "a1")
    planned = table.snapshot().base_files()[0].file_group  # region a's only file group
    WriteTransaction.begin(
        table.timeline_log,
        table.coordinator,
        table.table_id,
        operation="cluster",
        actor="planner",
        action=Action.CLUSTERING,
        cancellable=True,
        plan=ServicePlan(file_groups=(planned,), last_completed_instant=first),
    )
    for version in ("b0", "b1", "b2"):  # region b only: the plan is not overtaken
        put("b", version)
    result = table.clean(CleanPolicy(commits_retained=1, retention_window_s=0))
    assert result.cancelled == ()
    assert {f.path.split("/")[0] for f in result.files} == {"region=b"}  # a0 is kept
    assert set(table.read(as_of=first).column("v").to_pylist()) == {"a0"}


def test_snapshot_a_pending_write_builds_on_survives() -> None:
    table = mem_table()
    first = versions(table, 1)[0]
    WriteTransaction.begin(
        table.timeline_log, table.coordinator, table.table_id, operation="upsert", actor="slow"
    )  # requested after `first`: it builds on that snapshot (liveness unknown: not rolled back)
    later = versions(table, 3)
    result = table.clean(CleanPolicy(commits_retained=1, retention_window_s=0))
    assert values(table, first) == {"v0"}  # kept for the pending writer
    assert len(result.files) == 2  # the versions of later[0] and later[1]
    with pytest.raises(InstantCleanedError):
        table.read(as_of=later[0])


# -- resumability ----------------------------------------------------------------------------


def test_interrupted_clean_is_finished_as_planned() -> None:
    faulty = FaultyStorage(MemStorage())
    table = mem_table(faulty)
    versions(table, 4)
    faulty.fail("delete", nth=faulty.calls("delete") + 2)
    with pytest.raises(InjectedFaultError):
        table.clean(CleanPolicy(commits_retained=2, retention_window_s=0))
    pending = [i for i in table.state().pending() if i.action is Action.CLEAN]
    assert len(pending) == 1
    planned = pending[0].plan
    versions(table, 2)  # more garbage meanwhile; the resumed clean does not grow
    result = table.clean(
        CleanPolicy(commits_retained=3, retention_window_s=0)
    )  # another policy: not re-planned
    assert result.resumed == (pending[0].instant,)
    done = table.state().get(pending[0].instant)
    assert done is not None and done.state is Transition.COMPLETED and done.plan == planned
    cleans = [i for i in table.timeline() if i.action is Action.CLEAN]
    assert [c.state for c in cleans] == [Transition.COMPLETED] * len(cleans)


def test_two_cleans_never_pending_at_once() -> None:
    faulty = FaultyStorage(MemStorage())
    table = mem_table(faulty)
    versions(table, 3)
    other = Table(faulty.inner, table.config, coordinator=EmbeddedCoordinator(), actor="other")

    def other_cleaner_plans_first() -> None:
        other.clean(CleanPolicy(commits_retained=1, retention_window_s=0))

    faulty.before("write_if_absent", other_cleaner_plans_first)
    table.clean(CleanPolicy(commits_retained=1, retention_window_s=0))
    cleans = [i for i in table.timeline() if i.action is Action.CLEAN]
    assert len(cleans) == 1 and cleans[0].state is Transition.COMPLETED


# -- rollback of failed writes ---------------------------------------------------------------


def _dead_write(table: Table, *, beat: bool = True) -> tuple[str, str]:
    """A writer that requested, went inflight, put a file at its final key and died."""
    txn = WriteTransaction.begin(
        table.timeline_log, table.coordinator, table.table_id, operation="upsert", actor="w"
    )
    name = BaseFileName("00000000-0000", WriteToken(0, 0, 0), txn.instant).render()
    key = file_key("", name)
    if beat:
        with txn.heartbeat():
            txn.inflight(WorkloadProfile(operation="upsert"))
            table.storage.write(key, b"partial")
    else:
        table.storage.write(key, b"partial")
    return txn.instant, key


def test_dead_write_is_rolled_back_and_its_files_deleted() -> None:
    table = mem_table()
    versions(table, 1)
    instant, key = _dead_write(table)
    result = table.clean()
    assert result.rolled_back == (instant,)
    target = table.state().get(instant)
    assert target is not None and target.state is Transition.ROLLED_BACK
    assert target.rollback_by is not None
    rollback = table.state().get(target.rollback_by)
    assert rollback is not None and rollback.state is Transition.COMPLETED
    assert [f.path for f in result.files] == [key] and not table.storage.exists(key)
    assert "rolled_back" in result.files[0].reason


def test_liveness_unknown_is_left_alone_unless_named_dead() -> None:
    table = mem_table()
    instant, key = _dead_write(table, beat=False)  # no heartbeat seen: liveness unknown
    assert table.clean().rolled_back == () and table.storage.exists(key)
    assert table.clean(dead={instant}).rolled_back == (instant,)
    assert not table.storage.exists(key)


class _MonitorWithNoRecord(EmbeddedCoordinator):
    """A liveness service that answered and has no record of any instant (what
    ``KafkaCoordinator.never_heard_of`` reports when heartbeat-monitor never saw a beat)."""

    def never_heard_of(self, table_id: str, instant: str) -> bool:
        return True


def test_a_write_whose_executor_never_beat_is_rolled_back_three_tolerances_later() -> None:
    """The campaign's ``requested_left_behind``: killed between ``requested`` and its first
    beat, the writer leaves an instant no ``HeartbeatExpired`` will ever name."""
    table = mem_table()
    table = Table(table.storage, table.config, coordinator=_MonitorWithNoRecord())
    instant, key = _dead_write(table, beat=False)
    requested_s = Instant(instant).epoch_ms / 1000
    bound_s = NEVER_BEAT_TOLERANCES * table.coordinator.heartbeat_tolerance_s(table.table_id)
    assert table.clean(wall_clock=lambda: requested_s + bound_s - 1).rolled_back == ()
    assert table.storage.exists(key)
    assert table.clean(wall_clock=lambda: requested_s + bound_s + 1).rolled_back == (instant,)
    assert not table.storage.exists(key)


def test_an_old_write_is_not_judged_by_age_when_nobody_can_say_it_never_beat() -> None:
    table = mem_table()  # the embedded coordinator knows only its own process's heartbeats
    instant, key = _dead_write(table, beat=False)
    much_later_s = Instant(instant).epoch_ms / 1000 + 30 * 24 * 3600
    assert table.clean(wall_clock=lambda: much_later_s).rolled_back == ()
    assert table.storage.exists(key)


def test_rollback_intent_of_a_crashed_cleaner_is_resumed() -> None:
    faulty = FaultyStorage(MemStorage())
    table = mem_table(faulty)
    instant, key = _dead_write(table)
    # The cleaner dies right after appending its intent (its next append never happens).
    faulty.fail(
        "write_if_absent", nth=faulty.calls("write_if_absent") + 2, error=KeyboardInterrupt()
    )
    with pytest.raises(KeyboardInterrupt):
        table.clean()
    target = table.state().get(instant)
    assert target is not None and target.is_pending and target.rollback_by is not None
    table.clean(dead=())
    target = table.state().get(instant)
    assert target is not None and target.state is Transition.ROLLED_BACK
    assert not faulty.exists(key)


def test_dry_run_rolls_nothing_back() -> None:
    table = mem_table()
    instant, key = _dead_write(table)
    tail = table.state().tail_seq
    result = table.clean(dry_run=True)
    assert result.rolled_back == (instant,) and table.state().tail_seq == tail
    assert table.storage.exists(key)


# -- job leftovers and orphans ---------------------------------------------------------------


def test_leftovers_of_a_finished_job_are_deleted(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), name="t", record_key="id", schema=SCHEMA)
    instant = versions(table, 1)[0]
    # Table.write names its job <instant>-<uuid> (the Spark driver records a JobPlan instead).
    left = f"_temporary/manifest_{instant}-0123abcd/00/tasks/attempt_x/f.parquet"
    unknown = "_temporary/manifest_nobody/00/job.json"
    table.storage.write(left, b"x")
    table.storage.write(unknown, b"x")
    result = table.clean()
    assert [f.path for f in result.files] == [left]
    assert not table.storage.exists(left) and table.storage.exists(unknown)
    assert [f.path for f in result.orphans] == []  # too young to be an orphan


def test_orphans_listed_in_dry_run_deleted_only_when_asked(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), name="t", record_key="id", schema=SCHEMA)
    versions(table, 1)
    table.storage.write("junk.parquet", b"x")
    clock = ManualClock(start=time.time())
    assert table.clean(dry_run=True, wall_clock=clock.monotonic).orphans == ()  # too young
    clock.advance(3 * 24 * HOUR + 1)
    dry = table.clean(dry_run=True, wall_clock=clock.monotonic)
    assert [f.path for f in dry.orphans] == ["junk.parquet"] and dry.files == ()
    kept = table.clean(wall_clock=clock.monotonic)
    assert kept.instant is None and table.storage.exists("junk.parquet")
    gone = table.clean(delete_orphans=True, wall_clock=clock.monotonic)
    assert [f.path for f in gone.files] == ["junk.parquet"]
    assert not table.storage.exists("junk.parquet")
    assert values(table) == {"v0"}


def test_a_log_file_appended_in_place_lives_since_it_was_first_named() -> None:
    group = FileGroupId(partition_path="", file_id="00000000-0000")
    base = "00000000-0000_0-0-0_20240101000000001.parquet"
    log = ".00000000-0000_20240101000000001.log.1_0-0-0"

    def done(instant: str, seq: int, *paths: str) -> InstantState:
        stats = [
            WriteStat(
                file_group=group,
                path=p,
                base_instant="20240101000000001",
                num_records=1,
                size_bytes=10,
            )
            for p in paths
        ]
        return InstantState(
            instant=instant,
            action=Action.DELTACOMMIT,
            state=Transition.COMPLETED,
            requested_seq=seq,
            last_seq=seq,
            completed_seq=seq,
            commit=CommitStats(operation="upsert", write_stats=tuple(stats)),
        )

    writes = [
        done("20240101000000001", 1, base),
        done("20240101000000002", 2, log),
        done("20240101000000003", 3, log),  # the same log file, appended in place
    ]
    lives = {life.path: life for life in file_lives(writes)}
    assert lives[log].added == 1 and lives[log].removed is None
    assert lives[log].alive_at(1) and not lives[log].alive_at(0)
