"""The history reader stops at the ends it planned, even when the consumer hands it more.

librdkafka keeps fetching a partition that reached its end while other partitions are still
read, and one batch may run past an end. A read that kept those messages paired a lock grant
with no release: the release was on lock.requests past that topic's planned end, the grant it
caused on lock.replies, read later (the lake test's "lease 10 granted while lease 9 was
held")."""

from __future__ import annotations

from dataclasses import dataclass

from _events import TABLE
from confluent_kafka import TIMESTAMP_CREATE_TIME, TopicPartition

from lakewarden.clients import lock_request as request_record
from lakewarden.events import default_codec
from lakewarden.history.reader import PartitionRead, _read


@dataclass
class FakeMessage:
    """The accessors ``_read`` calls on a confluent_kafka ``Message``."""

    _topic: str
    _partition: int
    _offset: int
    _value: bytes

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return TIMESTAMP_CREATE_TIME, 1_000 + self._offset

    def value(self) -> bytes:
        return self._value

    def key(self) -> bytes:
        return TABLE.encode()

    def error(self) -> None:
        return None


class OverfetchingConsumer:
    """Hands out every message of each assigned partition in one batch, whatever the ends."""

    def __init__(self, logs: dict[tuple[str, int], list[bytes]]) -> None:
        self.logs = logs
        self.batches: list[list[FakeMessage]] = []

    def assign(self, partitions: list[TopicPartition]) -> None:
        batch = [
            FakeMessage(tp.topic, tp.partition, offset, value)
            for tp in partitions
            for offset, value in enumerate(self.logs[(tp.topic, tp.partition)])
            if offset >= tp.offset
        ]
        self.batches = [batch]

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        return self.batches.pop(0) if self.batches else []


def lock_request(n: int) -> bytes:
    record = request_record(
        table_id=TABLE,
        producer_id="test",
        request_id=f"r{n}",
        kind="acquire",
        owner="vm:1",
        ttl_ms=30_000,
        reply_topic="lakewarden.lock.replies",
        reply_partition=0,
        reply_key="vm:1",
        token=None,
        lease_expires_ms=None,
    )
    return default_codec().encode("LockRequest", record)


def test_messages_past_a_planned_end_are_not_read() -> None:
    topic = "lakewarden.lock.requests"
    logs = {(topic, 0): [lock_request(n) for n in range(5)]}
    planned = [PartitionRead(topic, 0, start=0, high=3, low=0)]

    read = list(_read(OverfetchingConsumer(logs), planned, default_codec(), TABLE, 10))  # type: ignore[arg-type]

    assert [item.offset for item in read] == [0, 1, 2]


def test_a_partition_done_early_yields_nothing_more_while_others_are_read() -> None:
    requests, replies = "lakewarden.lock.requests", "lakewarden.lock.replies"
    logs = {
        (requests, 0): [lock_request(n) for n in range(4)],
        (replies, 0): [lock_request(10 + n) for n in range(3)],
    }
    planned = [
        PartitionRead(requests, 0, start=0, high=2, low=0),
        PartitionRead(replies, 0, start=0, high=3, low=0),
    ]

    read = list(_read(OverfetchingConsumer(logs), planned, default_codec(), TABLE, 10))  # type: ignore[arg-type]

    assert sorted((item.topic, item.offset) for item in read) == [
        (replies, 0),
        (replies, 1),
        (replies, 2),
        (requests, 0),
        (requests, 1),
    ]
