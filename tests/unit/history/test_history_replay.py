"""replay: the timeline rebuilt from TimelineTransition events, diffed against storage."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from _events import event
from click.testing import CliRunner

from lakewarden.api.table import Table
from lakewarden.cli import cli
from lakewarden.clients.timeline_events import transition_record
from lakewarden.history import (
    Recorded,
    RetentionGap,
    TopicReplay,
    Unreadable,
    diff_timelines,
    entries_from_topic,
    read_storage_entries,
)
from lakewarden.history.replay import rebuild_state
from lakewarden.table.checkpoint import entry_key
from lakewarden.table.timeline_state import TimelineEntry

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


@pytest.fixture
def table(tmp_path: Path) -> Table:
    created = Table.create(str(tmp_path / "t"), name="t", record_key="id", schema=SCHEMA)
    created.write(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=SCHEMA), operation="insert")
    created.write(pa.table({"id": [3], "v": ["c"]}, schema=SCHEMA), operation="insert")
    return created


def published(table: Table) -> list[Recorded]:
    """The TimelineTransition event of every storage entry, as the announcer publishes it:
    a perfectly published topic."""
    table_id = table.config.table_id
    return [
        event(
            "TimelineTransition",
            entry.seq,
            **{k: v for k, v in record.items() if k != "envelope"},
            table=table_id,
            producer=entry.actor,
        )
        for entry in table.timeline_log.entries()
        for record in [transition_record(entry, table_id=table_id, producer_id=entry.actor)]
    ]


def _replay(table: Table, events: list[Recorded]) -> list[tuple[int, str]]:
    topic, conflicts = entries_from_topic(events)
    report = diff_timelines(topic, read_storage_entries(table.storage), conflicts=conflicts)
    return [(d.seq, d.kind) for d in report.differences]


def test_a_fully_published_timeline_replays_without_difference(table: Table) -> None:
    events = published(table)

    topic, _ = entries_from_topic([*events, events[0]])  # a redelivery is no conflict
    report = diff_timelines(topic, read_storage_entries(table.storage))

    assert report.clean
    assert (report.topic_entries, report.storage_entries) == (6, 6)
    assert {str(i.state) for i in report.state.instants.values()} == {"completed"}


def test_a_deleted_storage_entry_is_missing_and_an_altered_one_is_different(table: Table) -> None:
    events = published(table)
    table.storage.delete(entry_key(4))
    altered = json.loads(table.storage.read(entry_key(5)))
    altered["actor"] = "mallory"
    table.storage.write(entry_key(5), json.dumps(altered).encode())

    topic, _ = entries_from_topic(events)
    report = diff_timelines(topic, read_storage_entries(table.storage))

    assert [(d.seq, d.kind) for d in report.differences] == [(4, "missing"), (5, "different")]
    assert "actor is 'mallory' in storage" in report.differences[1].detail


def test_entries_the_topic_lacks_are_extra_and_two_versions_conflict(table: Table) -> None:
    events = published(table)
    original = events[1]
    twin = Recorded(original.name, {**original.record, "actor": "someone-else"})

    assert _replay(table, [*events[:3], twin]) == [
        (1, "conflicting"),
        (3, "extra"),
        (4, "extra"),
        (5, "extra"),
    ]


def test_a_malformed_storage_entry_is_reported(table: Table) -> None:
    table.storage.write(entry_key(2), b"{not json")

    assert _replay(table, published(table)[:2]) == [
        (2, "malformed"),
        (3, "extra"),
        (4, "extra"),
        (5, "extra"),
    ]


def _reading(
    events: list[Recorded | Unreadable],
) -> Callable[..., list[Unreadable | RetentionGap]]:
    """``replay_timeline`` over ``events`` instead of Kafka: fed, the problems returned."""

    def read(
        settings: object, table_id: str, replay: TopicReplay, **_: object
    ) -> list[Unreadable | RetentionGap]:
        problems: list[Unreadable | RetentionGap] = []
        for item in events:
            if isinstance(item, Recorded):
                replay.feed(item)
            else:
                problems.append(item)
        return problems

    return read


def test_the_replay_command_exits_1_on_a_difference(
    table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = published(table)
    monkeypatch.setattr("lakewarden.cli.replay.table_events", lambda *a, **k: events)
    monkeypatch.setattr("lakewarden.cli.replay.replay_timeline", _reading(events))
    runner = CliRunner()

    clean = runner.invoke(cli, ["replay", table.uri])
    table.storage.delete(entry_key(3))
    broken = runner.invoke(cli, ["replay", table.uri])

    assert clean.exit_code == 0, clean.output
    assert "6 entries on lakewarden.timeline, 6 in storage" in clean.output
    assert clean.output.rstrip().endswith("no difference")
    assert broken.exit_code == 1, broken.output
    assert "seq 3 missing: storage lacks requested of commit" in broken.output


def test_entry_objects_compare_field_by_field() -> None:
    # The diff relies on model equality covering every field the topic carries.
    assert set(TimelineEntry.model_fields) == {
        "seq",
        "instant",
        "action",
        "transition",
        "actor",
        "lock_token",
        "wall_time_ms",
        "payload",
    }


def test_the_fast_entry_is_the_validated_entry_and_a_bad_one_is_still_refused(
    table: Table,
) -> None:
    events = published(table)
    fast, _ = entries_from_topic(events)
    stored = {e.seq: e for e in table.timeline_log.entries()}

    for seq, entry in fast.items():  # the validator's own entry, field for field and type
        assert entry == stored[seq]
        assert entry.model_dump() == stored[seq].model_dump()
        assert type(entry.action) is type(stored[seq].action)
        assert type(entry.transition) is type(stored[seq].transition)
    bad = {
        "instant": "2025",
        "actor": "",
        "seq": -1,
        "payload": "[1, 2]",
        "transition": "exploded",
    }
    for name, value in bad.items():
        record = {**events[0].record, name: value}
        broken = Recorded(events[0].name, record, events[0].topic, 0, 0, None)
        assert entries_from_topic([broken])[0] == {}, name


def test_an_unreadable_message_is_reported_and_the_replay_goes_on(
    table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    newer = Unreadable("lakewarden.timeline", 0, 9, "unknown_fingerprint", "a newer producer")
    events = [*published(table), newer]
    monkeypatch.setattr("lakewarden.cli.replay.table_events", lambda *a, **k: events)
    monkeypatch.setattr("lakewarden.cli.replay.replay_timeline", _reading(events))

    result = CliRunner().invoke(cli, ["replay", table.uri])

    assert result.exit_code == 1, result.output
    assert "6 entries on lakewarden.timeline, 6 in storage" in result.output
    assert "unreadable lakewarden.timeline[0]@9: unknown_fingerprint" in result.output
    assert "lock decisions: 0 request(s) re-driven" in result.output


@pytest.mark.parametrize(
    "order",
    [
        [0, 1, 2, 3, 4, 5],  # as published: folded while read
        [1, 0, 3, 2, 5, 4],  # appenders that published out of order
        [0, 0, 1, 2, 2, 3, 4, 5],  # redeliveries
        [0, 1, 3, 4, 5],  # seq 2 never published: 3 and later wait for the end
        [2, 3, 4, 5],  # a read that began above seq 0 (--since, retention)
        [5, 4, 3, 2, 1, 0],
    ],
)
def test_the_fold_while_reading_is_the_fold_of_the_entries_in_seq_order(
    table: Table, order: list[int]
) -> None:
    events = published(table)
    replay = TopicReplay()
    for seq in order:
        replay.feed(events[seq])

    entries, conflicts = entries_from_topic(events[seq] for seq in order)
    assert replay.entries == entries and replay.conflicts == conflicts == []
    assert replay.state() == rebuild_state(entries)
