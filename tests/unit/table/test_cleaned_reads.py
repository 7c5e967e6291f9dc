"""Readers of cleaned snapshots (invariant 11): every read path that meets a file a clean
deleted raises ``InstantCleanedError``, a read whose snapshot a clean overtook mid-read reloads
and retries once, and no policy deletes a file superseded less than the table's retention
window ago (so a read in progress is not cut off). Never pyarrow's raw ``FileNotFoundError``.

Each test runs on a store pyarrow reads through ``Storage.read`` (in memory, as on S3) and on
a local directory pyarrow reads directly."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
import pytest
from _memstore import MemStorage

from lakewarden.storage import Storage
from lakewarden.storage._forwarding import ForwardingStorage, Operation
from lakewarden.storage.local import LocalStorage
from lakewarden.table import (
    CleaningPolicy,
    CleanPolicy,
    InstantCleanedError,
    MissingDataFileError,
    Table,
    TableConfig,
)
from lakewarden.table.clean.retention import instant_time_ms, plan_retention
from lakewarden.table.config import save_new_config
from lakewarden.table.coordinator import EmbeddedCoordinator
from lakewarden.testing import ManualClock

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
HOUR = 3600.0
NO_WINDOW = CleanPolicy(commits_retained=1, retention_window_s=0)
T = TypeVar("T")


class RaceStorage(ForwardingStorage):
    """Runs ``action`` once, just before the first data file is opened (read, or its local
    path taken for pyarrow): after the reader built its snapshot, before it read a file."""

    def __init__(self, inner: Storage) -> None:
        super().__init__(inner)
        self.action: Callable[[], object] | None = None

    def _invoke(self, op: Operation, key: str, call: Callable[[], T]) -> T:
        if op in ("read", "local_path") and key.endswith(".parquet") and self.action:
            action, self.action = self.action, None
            action()
        return call()


@pytest.fixture(params=["mem", "local"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    return MemStorage() if request.param == "mem" else LocalStorage(tmp_path / "t")


def make_table(store: Storage, **config: object) -> Table:
    options: dict[str, object] = {"schema": SCHEMA, **config}
    table_config = TableConfig.new(name="t", record_key="id", **options)  # type: ignore[arg-type]
    save_new_config(store, table_config)
    return Table(store, table_config, coordinator=EmbeddedCoordinator())


def batch(version: str) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "v": version} for i in range(3)], schema=SCHEMA)


def values(data: pa.Table) -> set[str]:
    return set(data.column("v").to_pylist())


# -- pinned reads of a cleaned snapshot ------------------------------------------------------


def test_to_arrow_dataset_as_of_a_cleaned_instant_raises_the_named_error(store: Storage) -> None:
    table = make_table(store)
    first = table.write(batch("v0")).instant
    table.write(batch("v1"))
    assert table.clean(NO_WINDOW).files_deleted == 1
    with pytest.raises(InstantCleanedError) as err:
        table.to_arrow_dataset(as_of=first)
    assert err.value.instant == first and "Help:" in str(err.value)
    assert values(table.to_arrow_dataset().to_table()) == {"v1"}


@pytest.mark.parametrize("table_type", ["cow", "mor"])
def test_changes_until_a_cleaned_instant_raises_the_named_error(
    store: Storage, table_type: str
) -> None:
    table = make_table(store, table_type=table_type)
    first = table.write(batch("v0"), operation="insert").instant
    # The upsert folds the insert's append group into the canonical one: v0's file superseded.
    table.write(batch("v1"), operation="upsert")
    assert table.clean(NO_WINDOW).files_deleted >= 1
    with pytest.raises(InstantCleanedError) as err:
        table.changes(None, until=first)
    assert err.value.instant == first
    assert values(table.changes(first)) == {"v1"}  # the changes still readable are read


# -- a read that a clean overtakes -----------------------------------------------------------


def racing(store: Storage, **config: object) -> tuple[Table, Table, RaceStorage]:
    """A writer (and cleaner) and a reader of one table; the reader's store runs the race."""
    writer = make_table(store, **config)
    raced = RaceStorage(store)
    reader = Table(raced, writer.config, coordinator=EmbeddedCoordinator(), actor="reader")
    return writer, reader, raced


def test_read_overtaken_by_a_clean_retries_on_the_new_snapshot(store: Storage) -> None:
    writer, reader, raced = racing(store)
    writer.write(batch("v0"))

    def write_and_clean() -> None:  # after the reader planned v0's file, before it opened it
        writer.write(batch("v1"))
        assert writer.clean(NO_WINDOW).files_deleted == 1

    raced.action = write_and_clean
    assert values(reader.read()) == {"v1"}  # a committed snapshot, never a raw error
    assert raced.action is None


def test_pinned_read_overtaken_by_a_clean_raises_the_named_error(store: Storage) -> None:
    writer, reader, raced = racing(store)
    first = writer.write(batch("v0")).instant
    raced.action = lambda: (writer.write(batch("v1")), writer.clean(NO_WINDOW))
    with pytest.raises(InstantCleanedError) as err:
        reader.read(as_of=first)
    assert err.value.instant == first


def test_changes_overtaken_by_a_clean_retry_on_the_new_snapshot(store: Storage) -> None:
    writer, reader, raced = racing(store)
    writer.write(batch("v0"))
    raced.action = lambda: (writer.write(batch("v1")), writer.clean(NO_WINDOW))
    assert values(reader.changes(None)) == {"v1"}


# -- the retention window --------------------------------------------------------------------


def test_the_retention_window_keeps_a_read_in_progress_whole(store: Storage) -> None:
    """The default window (1 hour): a clean landing mid-read deletes nothing the read uses."""
    writer, reader, raced = racing(store)
    writer.write(batch("v0"))
    cleans = []

    def write_and_clean() -> None:
        writer.write(batch("v1"))
        cleans.append(writer.clean(CleanPolicy(commits_retained=1)))

    raced.action = write_and_clean
    assert values(reader.read()) == {"v0"}  # the snapshot the read started on, whole
    assert cleans[0].files == () and cleans[0].instant is None


@pytest.mark.parametrize(
    "policy",
    [
        CleanPolicy(commits_retained=1),
        CleanPolicy(policy=CleaningPolicy.KEEP_LATEST_FILE_VERSIONS, file_versions_retained=1),
        CleanPolicy(policy=CleaningPolicy.KEEP_LATEST_BY_HOURS, hours_retained=0.01),
    ],
    ids=lambda p: p.policy.value,
)
def test_every_policy_honours_the_retention_window(store: Storage, policy: CleanPolicy) -> None:
    table = make_table(store)
    first = table.write(batch("v0")).instant
    table.write(batch("v1"))
    clock = ManualClock(start=time.time() + 60)  # the hours policy's 36 s are past
    inside = table.clean(policy, wall_clock=clock.monotonic)
    assert inside.files == () and values(table.read(as_of=first)) == {"v0"}
    clock.advance(HOUR)
    outside = table.clean(policy, wall_clock=clock.monotonic)
    assert outside.files_deleted == 1
    with pytest.raises(InstantCleanedError):
        table.read(as_of=first)


def test_the_window_counts_from_when_the_superseding_write_completed(store: Storage) -> None:
    """A write that started long before it completed does not make the files it superseded
    look old: the window starts at its ``completed`` entry, not at its instant time."""
    table = make_table(store)
    table.write(batch("v0"))
    table.write(batch("v1"))
    state = table.state()
    superseding = state.completed()[-1]
    started_ms = instant_time_ms(superseding)
    now_ms = started_ms + int(2 * HOUR * 1000)
    policy = CleanPolicy(commits_retained=1)
    by_start = plan_retention(state, policy, now_ms=now_ms)
    assert len(by_start.garbage) == 1  # had it completed when it started: 2 h ago
    slow = plan_retention(  # it completed half an hour ago
        state, policy, now_ms=now_ms, completed_ms=lambda _: now_ms - int(HOUR / 2 * 1000)
    )
    assert slow.garbage == ()


def test_the_window_is_a_table_setting_in_table_json(tmp_path: Path) -> None:
    policy = CleanPolicy(retention_window_s=6 * HOUR)
    table = Table.create(
        str(tmp_path / "t"), name="t", record_key="id", schema=SCHEMA, clean_policy=policy
    )
    assert Table.open(table.uri).config.clean_policy.retention_window_s == 6 * HOUR
    assert CleanPolicy().retention_window_s == HOUR
    assert CleanPolicy.parse("keep-latest-commits=1", base=policy).retention_window_s == 6 * HOUR


def test_a_file_lost_outside_any_clean_is_named_too(store: Storage) -> None:
    table = make_table(store)
    table.write(batch("v0"))
    lost = table.snapshot().base_files()[0].path
    store.delete(lost)  # by hand: no clean lists it
    with pytest.raises(MissingDataFileError) as err:
        table.read()
    assert err.value.path.endswith(lost) and "no clean deleted it" in str(err.value)
