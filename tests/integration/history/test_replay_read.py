"""``replay_timeline`` against a real broker: it folds what ``read_table_events`` + ``feed``
fold, reports the same problems (a corrupt message, a retention gap with the broker time of
the first event kept), skips other tables' events, and stops at the ends it planned."""

from __future__ import annotations

import json
import uuid
from collections import Counter

import pytest
from confluent_kafka import Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from lakewarden.events import default_codec, ensure_topics, make_event
from lakewarden.events.topics import TIMELINE
from lakewarden.history import (
    Recorded,
    RetentionGap,
    TopicReplay,
    Unreadable,
    read_table_events,
    replay_timeline,
)
from lakewarden.history._replay_read import CHECK_ELSEWHERE_FROM
from lakewarden.settings import Settings

TABLE = "0d6f3c1e-5b8a-4c2e-9f70-1a2b3c4d5e6f"
OTHER = "9e8d7c6b-5a49-4382-b1a0-f9e8d7c6b5a4"
PAYLOADS = {
    "requested": {"operation": "insert"},
    "inflight": {"operation": "insert", "file_groups": []},
    "completed": {"operation": "insert", "write_stats": []},
}


@pytest.fixture(scope="module")
def settings(kafka_settings: Settings) -> Settings:
    """A topic prefix of this module's own, with the timeline topic of a table (60 instants)
    whose three oldest events retention deleted, and amid its events a corrupt message keyed
    by it and another table's event."""
    prefix = f"t{uuid.uuid4().hex[:8]}.lakewarden."
    made = kafka_settings.model_copy(
        update={"kafka": kafka_settings.kafka.model_copy(update={"topic_prefix": prefix})}
    )
    ensure_topics(made, specs=[TIMELINE])
    topic = TIMELINE.name(made)
    producer = Producer({"bootstrap.servers": str(made.kafka.bootstrap_servers)})
    partitions: set[int] = set()

    def delivered(err: object, msg: Message) -> None:
        assert err is None, err
        partitions.add(msg.partition() or 0)

    for i in range(60):
        for step, transition in enumerate(("requested", "inflight", "completed")):
            value = _event(TABLE, 3 * i + step, i, transition)
            producer.produce(topic, value, key=TABLE, on_delivery=delivered)
            if i == 30 and step == 0:
                producer.produce(topic, b"\xc3\x01 not an event", key=TABLE)
                producer.produce(topic, _event(OTHER, 0, i, transition), key=OTHER)
    assert producer.flush(30) == 0
    (partition,) = partitions  # the table's: keyed by its id
    admin = AdminClient({"bootstrap.servers": str(made.kafka.bootstrap_servers)})
    for future in admin.delete_records([TopicPartition(topic, partition, 3)]).values():
        future.result(30)
    return made


def _event(table: str, seq: int, i: int, transition: str, payload: str | None = None) -> bytes:
    record = make_event(
        "TimelineTransition",
        table_id=table,
        producer_id="test",
        seq=seq,
        instant=f"20250101{i:09d}",
        action="commit",
        transition=transition,
        actor="writer",
        lock_token=seq + 1,
        wall_time=1_735_689_600_000 + seq,
        payload=json.dumps(PAYLOADS[transition]) if payload is None else payload,
    )
    return default_codec().encode("TimelineTransition", record)


def _by_reader(settings: Settings, table: str) -> tuple[TopicReplay, list[object]]:
    by_reader, reader_problems = TopicReplay(), []
    for item in read_table_events(settings, table, topics=[TIMELINE]):
        if isinstance(item, Recorded):
            by_reader.feed(item)
        else:
            reader_problems.append(item)
    return by_reader, reader_problems


# In process (a small read), and with the payloads checked by a second process.
@pytest.mark.parametrize("check_elsewhere_from", [CHECK_ELSEWHERE_FROM, 0])
def test_replay_timeline_folds_what_the_history_reader_feeds(
    settings: Settings, check_elsewhere_from: int
) -> None:
    by_reader, reader_problems = _by_reader(settings, TABLE)
    replay = TopicReplay()

    problems = replay_timeline(settings, TABLE, replay, check_elsewhere_from=check_elsewhere_from)

    assert problems == reader_problems
    assert [type(p) for p in problems] == [Unreadable, RetentionGap]
    gap = problems[-1]
    assert isinstance(gap, RetentionGap) and gap.low_offset == 3
    assert gap.first_kept_ms is not None
    assert dict(replay.entries) == dict(by_reader.entries)
    assert sorted(replay.entries) == list(range(3, 180))  # the table's own, from seq 3 on
    assert replay.state() == by_reader.state()
    assert replay.state().tail_seq == 179
    summary = replay.summary()
    assert summary.states == Counter(i.state.value for i in replay.state().instants.values())
    assert summary.rejected == replay.state().rejected


# Invalid inflight / completed payloads among valid ones: a rejection, a text that is no
# JSON object (its record makes no entry) and a rejection at the very last entry.
INVALID = {(5, "inflight"): '{"file_groups": "nope"}', (12, "completed"): "[1]"}
INVALID[(19, "completed")] = '{"write_stats": 3}'


def test_replay_timeline_with_invalid_payloads_folds_what_the_reader_feeds(
    kafka_settings: Settings,
) -> None:
    """The second process finds them, and the read made again in process folds what the
    history's reader and ``feed`` fold."""
    prefix = f"t{uuid.uuid4().hex[:8]}.lakewarden."
    made = kafka_settings.model_copy(
        update={"kafka": kafka_settings.kafka.model_copy(update={"topic_prefix": prefix})}
    )
    ensure_topics(made, specs=[TIMELINE])
    producer = Producer({"bootstrap.servers": str(made.kafka.bootstrap_servers)})
    for i in range(20):
        for step, transition in enumerate(("requested", "inflight", "completed")):
            payload = INVALID.get((i, transition))
            value = _event(TABLE, 3 * i + step, i, transition, payload)
            producer.produce(TIMELINE.name(made), value, key=TABLE)
    assert producer.flush(30) == 0
    by_reader, reader_problems = _by_reader(made, TABLE)
    replay = TopicReplay()

    problems = replay_timeline(made, TABLE, replay, check_elsewhere_from=0)

    assert problems == reader_problems == []
    assert dict(replay.entries) == dict(by_reader.entries)
    assert 38 not in replay.entries  # the completed whose payload is no JSON object
    state = replay.state()
    assert state == by_reader.state()
    assert {16, 59} <= {r.seq for r in state.rejected}  # and what follows the missing 38
    assert replay.summary().rejected == state.rejected


def test_replay_timeline_since_a_time_after_the_end_reads_nothing(settings: Settings) -> None:
    replay = TopicReplay()

    problems = replay_timeline(settings, TABLE, replay, since_ms=2**42)

    assert problems == []
    assert len(replay.entries) == 0
